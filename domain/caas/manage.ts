import { Resolver } from 'node:dns/promises';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { TargetPolicy } from '../../infra/webhook-targets';
import type { CaasProvider } from '../../providers/caas.provider';
import { checkSourceProblems } from './source';
import { backendUnavailable, conflict, DomainError, quotaExceeded, validationFailed, type FieldError } from '../errors';
import { addLog, appRef, findApp, findDeployment, hostsOf, type AppRow, type CaasServiceRow } from './store';

/**
 * Changes of a service's apps (SPEC "CaaS", DECISIONS "CaaS"): apps, their variables and domains.
 * Variables are sealed at rest and reach only the containers; domains must point at the service's
 * `ip` (through DNS_RESOLVER) before they are stored.
 */
export const ENV_PURPOSE = 'caas-env-value';
export const APP_NAME = /^[a-z][a-z0-9-]{0,30}[a-z0-9]$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const HOST = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;
const MAX_ENV_VALUE = 32 * 1024;
const MAX_VARS = 200;

/** What a `caas-starter` service holds at most (DECISIONS: `limits`). */
export const CAAS_LIMITS = { apps: 3, databases: 2 } as const;
/** Each app's container (docs/caas.md). */
export const APP_RESOURCES = { memoryBytes: 256 * 1024 * 1024, cpus: 0.5 } as const;

export interface CaasDeps {
  db: Knex;
  keyring: Keyring;
  caas: CaasProvider;
  policy: TargetPolicy;
  appsDomain: string;
  resolver?: string;
}

export async function createApp(deps: CaasDeps, serviceId: number, input: { name: string; source: unknown }): Promise<AppRow> {
  const errors: FieldError[] = [];
  if (!APP_NAME.test(input.name)) errors.push({ param: 'name', message: 'must match ^[a-z][a-z0-9-]{0,30}[a-z0-9]$' });
  errors.push(...(await checkSourceProblems(input.source, deps.policy)));
  if (errors.length) throw validationFailed(errors);
  const source = input.source as { type: 'archive'; url: string };
  return deps.db.transaction(async (trx) => {
    await trx('services').where({ id: serviceId }).forUpdate().first();
    if (await trx('caas_apps').where({ service_id: serviceId, name: input.name }).first()) {
      throw new DomainError(409, 'invalid_request_error', 'already_exists', `An app named ${input.name} exists in this service.`, 'name');
    }
    const [{ n }] = await trx('caas_apps').where({ service_id: serviceId }).count({ n: '*' });
    if (Number(n) >= CAAS_LIMITS.apps) throw quotaExceeded(`The service holds at most ${CAAS_LIMITS.apps} apps (limits.apps); delete one first.`);
    const [row] = await trx('caas_apps')
      .insert({
        service_id: serviceId,
        name: input.name,
        source: JSON.stringify({ type: 'archive', url: source.url }),
        default_host: `${input.name}-${serviceId}.${deps.appsDomain}`,
      })
      .returning('*');
    return { ...row, id: Number(row.id), service_id: Number(row.service_id) };
  });
}

/** Deletes the app: its containers, images and route on the backend, then its records (variables, domains, deployments); databases stay. */
export async function deleteApp(deps: CaasDeps, serviceId: number, rawId: string): Promise<void> {
  const app = await findApp(deps.db, serviceId, rawId);
  const deployments: Array<{ id: string }> = await deps.db('caas_deployments').where({ app_id: app.id }).select('id');
  await deps.caas.removeApp(
    serviceId,
    appRef(app.id),
    deployments.map((d) => d.id),
  );
  await deps.db('caas_apps').where({ id: app.id }).delete();
}

/** Replaces the app's whole set of variables; the values sealed. Effective at the next deploy or restart. */
export async function putEnv(deps: CaasDeps, serviceId: number, rawId: string, vars: unknown): Promise<string[]> {
  const app = await findApp(deps.db, serviceId, rawId);
  const errors: FieldError[] = [];
  if (!Array.isArray(vars)) throw validationFailed([{ param: 'vars', message: 'must be an array of {name, value}' }]);
  if (vars.length > MAX_VARS) errors.push({ param: 'vars', message: `at most ${MAX_VARS} variables` });
  const seen = new Set<string>();
  vars.forEach((v: unknown, i) => {
    const item = v as { name?: unknown; value?: unknown };
    if (typeof item !== 'object' || item === null) return errors.push({ param: `vars.${i}`, message: 'must be an object {name, value}' });
    const name = item.name;
    if (typeof name !== 'string' || !ENV_NAME.test(name)) errors.push({ param: `vars.${i}.name`, message: 'must match ^[A-Za-z_][A-Za-z0-9_]{0,127}$' });
    else if (name === 'PORT' || name.startsWith('DATABASE_URL') || name.startsWith('CAAS_'))
      errors.push({ param: `vars.${i}.name`, message: `${name} is set by the platform` });
    else if (seen.has(name)) errors.push({ param: `vars.${i}.name`, message: `${name} is given twice` });
    else seen.add(name);
    if (typeof item.value !== 'string') errors.push({ param: `vars.${i}.value`, message: 'must be a string' });
    else if (Buffer.byteLength(item.value) > MAX_ENV_VALUE) errors.push({ param: `vars.${i}.value`, message: `must be at most ${MAX_ENV_VALUE} bytes` });
    else if (item.value.includes('\0')) errors.push({ param: `vars.${i}.value`, message: 'must not contain a NUL character' });
  });
  if (errors.length) throw validationFailed(errors);
  const list = vars as Array<{ name: string; value: string }>;
  await deps.db.transaction(async (trx) => {
    await trx('caas_apps').where({ id: app.id }).forUpdate().first();
    await trx('caas_env').where({ app_id: app.id }).delete();
    if (list.length) {
      await trx('caas_env').insert(
        list.map((v, i) => ({ app_id: app.id, name: v.name, value_sealed: deps.keyring.encrypt(ENV_PURPOSE, v.value), position: i })),
      );
    }
    await trx('caas_apps').where({ id: app.id }).update({ updated_at: trx.fn.now() });
  });
  return list.map((v) => v.name);
}

export async function envNames(db: Knex, appId: number): Promise<string[]> {
  const rows: Array<{ name: string }> = await db('caas_env').where({ app_id: appId }).orderBy('position').select('name');
  return rows.map((r) => r.name);
}

/** The app's variables in clear, for its container (never for an answer or a log). */
export async function envOf(db: Knex, keyring: Keyring, appId: number): Promise<Record<string, string>> {
  const rows: Array<{ name: string; value_sealed: string }> = await db('caas_env').where({ app_id: appId }).orderBy('position');
  return Object.fromEntries(rows.map((r) => [r.name, keyring.decrypt(ENV_PURPOSE, r.value_sealed)]));
}

/** `host` as DECISIONS wants it (2+ DNS labels, lower-case, not localhost), or 400 before any lookup. */
export function checkHost(raw: string): string {
  const host = raw.trim().toLowerCase().replace(/\.$/, '');
  if (!HOST.test(host) || host === 'localhost' || host.endsWith('.localhost')) {
    throw validationFailed([{ param: 'host', message: 'must be a DNS name of two labels or more ([a-z0-9-]), without scheme, port, path or wildcard' }]);
  }
  return host;
}

/** Whether `host` resolves to `ip` through the configured resolver (DNS_RESOLVER, else the system's). */
async function pointsAt(host: string, ip: string, resolverAddress?: string): Promise<boolean> {
  const resolver = new Resolver({ timeout: 2_000, tries: 2 });
  if (resolverAddress) resolver.setServers([resolverAddress]);
  const ask = async (fn: () => Promise<string[]>) => {
    try {
      return await fn();
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      if (['ENOTFOUND', 'ENODATA', 'ENONAME', 'NOTFOUND', 'NODATA', 'SERVFAIL', 'REFUSED'].includes(code)) return [];
      throw backendUnavailable('caas', 'DNS resolver');
    }
  };
  const [v4, v6] = await Promise.all([ask(() => resolver.resolve4(host)), ask(() => resolver.resolve6(host))]);
  return [...v4, ...v6].includes(ip);
}

/** Routes `host` to the app: `created` false when it was the app's already. Not atomic (DECISIONS): a retry is safe. */
export async function addDomain(
  deps: CaasDeps,
  space: CaasServiceRow,
  rawId: string,
  rawHost: string,
): Promise<{ host: string; app_id: number; created_at: Date; created: boolean }> {
  const host = checkHost(rawHost);
  const app = await findApp(deps.db, space.service_id, rawId);
  const existing = await deps.db('caas_domains').where({ host }).first();
  if (existing && Number(existing.app_id) !== app.id) throw conflict(`${host} is routed to another app.`);
  if (!existing && host === app.default_host) throw conflict(`${host} is the app's default host already.`);
  if (!existing && !(await pointsAt(host, space.ip, deps.resolver))) {
    throw new DomainError(
      400,
      'invalid_request_error',
      'domain_not_pointed',
      `${host} does not resolve to this service's address ${space.ip}; point it there first.`,
      'host',
    );
  }
  const row =
    existing ??
    (await deps.db('caas_domains').insert({ host, app_id: app.id, service_id: space.service_id }).onConflict('host').ignore().returning('*'))[0] ??
    (await deps.db('caas_domains').where({ host }).first());
  if (Number(row.app_id) !== app.id) throw conflict(`${host} is routed to another app.`);
  await reroute(deps, app);
  return { host, app_id: app.id, created_at: row.created_at, created: !existing };
}

export async function deleteDomain(deps: CaasDeps, serviceId: number, rawId: string, rawHost: string): Promise<void> {
  const app = await findApp(deps.db, serviceId, rawId);
  const host = rawHost.trim().toLowerCase().replace(/\.$/, '');
  await deps.db('caas_domains').where({ host, app_id: app.id }).delete();
  await reroute(deps, app);
}

/** Points the app's current host names at its serving deployment (after a domain change). */
async function reroute(deps: CaasDeps, app: AppRow): Promise<void> {
  const fresh = await findApp(deps.db, app.service_id, appRef(app.id));
  await deps.caas.route(app.service_id, appRef(app.id), await hostsOf(deps.db, fresh), fresh.current_deployment_id);
}

/**
 * Restarts the app's serving deployment: a new container from the same image with the current
 * variables (a container's environment is fixed when it is created), routed once it listens.
 * `409` when nothing is deployed; `503` when the backend does not answer (the app keeps serving).
 */
export async function restartApp(
  deps: CaasDeps & { runEnv: (app: AppRow) => Promise<Record<string, string>>; startTimeoutMs: number },
  serviceId: number,
  rawId: string,
): Promise<AppRow> {
  const app = await findApp(deps.db, serviceId, rawId);
  const current = app.current_deployment_id ? await findDeployment(deps.db, app.current_deployment_id) : null;
  if (!current) throw conflict('Nothing is deployed for this app yet; deploy it first.');
  await addLog(deps.db, app.id, current.id, 'platform', ['restart requested: a new container with the current variables']);
  const started = await deps.caas.start(serviceId, appRef(app.id), current.id, { env: await deps.runEnv(app), ...APP_RESOURCES }, deps.startTimeoutMs);
  if (started.state !== 'listening') {
    await addLog(deps.db, app.id, current.id, 'platform', [
      `the restarted container did not listen (${started.state}${started.exitCode === null ? '' : `, exit code ${started.exitCode}`})`,
    ]);
    throw conflict('The app did not start listening again after the restart; see its logs.');
  }
  await deps.caas.route(serviceId, appRef(app.id), await hostsOf(deps.db, app), current.id);
  await deps.db('caas_deployments').where({ id: current.id }).update({ host_port: started.hostPort });
  await deps.db('caas_apps').where({ id: app.id }).update({ updated_at: deps.db.fn.now() });
  return (await findApp(deps.db, serviceId, rawId))!;
}
