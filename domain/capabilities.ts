/**
 * What each kind of service can do through /v1 (the `capabilities` map of Service and of the family
 * resources). Products may narrow these (an lxc VPS has no SPICE console, a plan without backups...).
 */
export const DEFAULT_CAPABILITIES: Record<string, Record<string, boolean>> = {
  vps: { power: true, reinstall: true, backups: true, restore: true, console: true, metrics: true, rename: true, templates: true },
  dns: { records: true, export: true },
  dbaas: { backups: true, databases: true, users: true, restart: true, logs: true, stats: true, credentials: true },
  caas: { apps: true, deploy: true, databases: true, domains: true, logs: true },
  lb: { listeners: true, backends: true, stats: true },
  objectstorage: { buckets: true, keys: true, presign: true, metrics: true },
  mailgateway: { domains: true, keys: true, smtp: true, metrics: true },
  other: {},
  // A catalog family whose services are `other`: keyed by the product family (the seeds look it up first).
  wordpress: {
    console: true,
    backups: true,
    restore: true,
    plugins: true,
    domains: true,
    cdn: true,
    edgeproxy: false,
    cache: true,
    php: true,
    cron: true,
    email: true,
    logs: true,
    monitoring: true,
    core_updates: true,
    recipes: true,
  },
};
