/**
 * The local-server kit: what every real backend that runs a server process on this machine needs
 * (PowerDNS, HAProxy, the PostgreSQL and MariaDB instances, and the families to come). Nothing in it
 * knows a family or the control plane's database, so a host agent can run it on any machine.
 *
 * - install check: `requireBinary`, `requireFile` (the error names the install script);
 * - data directory its account can reach: `serverDataRoot`, `ensureReachable`, `makeDirectory`;
 * - ports found free: `freePort`, `freeLoopbackPort`, `probeBind`, `portOrFree`;
 * - daemonise, pidfile, re-adopt: `spawnDetached`, `readPidFile`, `processAlive`, `stopProcess`,
 *   `waitFor` (HAProxy, the PostgreSQL and MariaDB instances, PowerDNS: providers/powerdns/powerdns.server.ts);
 * - a server with fixed names in /tmp kept apart from other accounts: `inPrivateTmp` (SeaweedFS);
 * - one change at a time across processes: `withFileLock`;
 * - a one-per-data-directory daemon's start: `adoptOrStart` (find, else start once under
 *   `start.lock`), `awaitDaemonReady` (until it answers or exits; the error ends with its log);
 * - logs: `tailLines`;
 * - files in a directory the server's account writes: `openTenantFile`, `readTenantFile` (no links,
 *   FIFOs or hard links, capped reads), used by root for logs, pidfiles and backup metadata;
 * - clear errors: `LocalServerError` (cause and fix in one message), `CommandError`.
 *
 * A keeper (domain/lb/keeper.ts, domain/dbaas/keeper.ts) calls its provider's idempotent start on
 * every pass: a server found through its pidfile is adopted, one that is gone is started again.
 */
export * from './daemon';
export * from './data-dir';
export * from './errors';
export * from './install';
export * from './local-run';
export * from './logs';
export * from './ports';
export * from './process';
export * from './tenant-files';
