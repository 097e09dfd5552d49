/**
 * DBaaS instance benchmark: `npx tsx bench/dbaas.bench.ts [instances] [objects]` (default 3 x 20).
 *
 * 1. The real backend (providers/dbinstances/) under a temporary root, for each engine: provisions
 *    `instances` instances one after the other (initdb or mariadb-install-db, TLS certificate,
 *    start, admin user), then on one of them creates and drops `objects` databases and creates
 *    `objects` users, restarts it a few times and takes a few backups.
 * 2. The same through the API (createApi on a fresh database, no Temporal needed for these routes):
 *    the instance of a dbaas service built by the dev route (what the order provisioner does), then
 *    `objects` x POST /v1/dbaas/{id}/databases and /users, end to end over HTTP.
 * Prints min, median, p95 and max of each step. Needs root (the servers run as the postgres and
 * mysql accounts) and the PostgreSQL server of scripts/ensure-tools.sh.
 */
import { mkdtempSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { createApi } from '../api/bootstrap';
import { loadConfig } from '../common/config';
import type { DbEngine } from '../providers/dbaas.provider';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createService, createUser } from '../test/helpers/fixtures';

const INSTANCES = Number(process.argv[2] ?? 3);
const OBJECTS = Number(process.argv[3] ?? 20);
const RESTARTS = 3;
const BACKUPS = 3;

function summary(label: string, samples: number[]): string {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  const ms = (n: number) => `${n.toFixed(n < 100 ? 1 : 0)} ms`.padStart(10);
  return `  ${label.padEnd(28)} n=${String(sorted.length).padEnd(4)} min ${ms(sorted[0])}  median ${ms(at(0.5))}  p95 ${ms(at(0.95))}  max ${ms(sorted[sorted.length - 1])}`;
}

async function timed<T>(samples: number[], fn: () => Promise<T>): Promise<T> {
  const start = process.hrtime.bigint();
  const result = await fn();
  samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  return result;
}

async function benchEngine(provider: DbInstancesAdapter, engine: DbEngine): Promise<void> {
  const provision: number[] = [];
  const createDb: number[] = [];
  const dropDb: number[] = [];
  const createUser: number[] = [];
  const restart: number[] = [];
  const backup: number[] = [];
  const names: string[] = [];
  for (let i = 0; i < INSTANCES; i++) {
    const name = `bench-${engine}-${i}`;
    names.push(name);
    await timed(provision, () =>
      provider.createInstance({ name, serviceId: i + 1, engine, adminUsername: 'admin', adminPassword: `bench-admin-password-${i}` }),
    );
  }
  const target = names[0];
  for (let i = 0; i < OBJECTS; i++) await timed(createDb, () => provider.createDatabase(target, { name: `db_${i}` }));
  for (let i = 0; i < OBJECTS; i++) await timed(dropDb, () => provider.deleteDatabase(target, `db_${i}`));
  for (let i = 0; i < OBJECTS; i++) await timed(createUser, () => provider.createUser(target, { username: `user_${i}`, password: `bench-user-password-${i}` }));
  for (let i = 0; i < RESTARTS; i++) await timed(restart, () => provider.restartInstance(target));
  for (let i = 0; i < BACKUPS; i++) {
    await timed(backup, async () => {
      const started = await provider.startBackup(target, `bench-${i}`);
      for (;;) {
        const found = (await provider.listBackups(target)).find((b) => b.id === started.id);
        if (found && found.status !== 'running') return found;
        await new Promise((r) => setTimeout(r, 20));
      }
    });
  }
  const { version } = await provider.status(target);
  console.log(`${engine} ${version}`);
  console.log(summary('provision an instance', provision));
  console.log(summary('create a database', createDb));
  console.log(summary('drop a database', dropDb));
  console.log(summary('create a user', createUser));
  console.log(summary('restart', restart));
  console.log(summary('backup (start to listed)', backup));
  for (const name of names) await provider.destroyInstance(name);
}

async function post(url: string, token: string | null, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

async function benchHttp(root: string): Promise<void> {
  const database = await createTestDatabase();
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    DBAAS_DATA_DIR: root,
    CLOUD_DEV_ENDPOINTS: '1',
    LOG_LEVEL: 'silent',
    NODE_ENV: 'test',
  });
  const api = await createApi(config, { db: database.db });
  const server = await new Promise<import('node:http').Server>((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const { accountId } = await createAccount(database.db);
    const { userId } = await createUser(database.db, accountId, { isOwner: true });
    const { token } = await createApiKey(database.db, accountId, userId, { scopes: ['dbaas:read', 'dbaas:write'] });
    for (const [engine, product] of [
      ['postgresql', 'dbaas-postgres-s'],
      ['mysql', 'dbaas-mysql-s'],
    ] as const) {
      const provision: number[] = [];
      const createDb: number[] = [];
      const createUserMs: number[] = [];
      const svc = await createService(database.db, accountId, { family: 'dbaas', product });
      const built = await timed(provision, () => post(`${base}/_dev/dbaas/${svc.id}/instance`, null, {}));
      if (built.status !== 200) throw new Error(`instance: ${JSON.stringify(built.body)}`);
      for (let i = 0; i < OBJECTS; i++) {
        const res = await timed(createDb, () => post(`${base}/v1/dbaas/${svc.id}/databases`, token, { name: `http_db_${i}` }));
        if (res.status !== 201) throw new Error(`database: ${JSON.stringify(res.body)}`);
      }
      for (let i = 0; i < OBJECTS; i++) {
        const res = await timed(createUserMs, () =>
          post(`${base}/v1/dbaas/${svc.id}/users`, token, { username: `http_user_${i}`, password: `bench-user-password-${i}` }),
        );
        if (res.status !== 201) throw new Error(`user: ${JSON.stringify(res.body)}`);
      }
      console.log(`${engine} through the API`);
      console.log(summary('provision (dev route)', provision));
      console.log(summary('POST .../databases', createDb));
      console.log(summary('POST .../users', createUserMs));
    }
  } finally {
    server.close();
    await api.close();
    await database.drop();
  }
}

async function main() {
  const root = mkdtempSync(path.join(os.tmpdir(), 'dbaas-bench-'));
  const provider = new DbInstancesAdapter({ rootDir: root, pollIntervalMs: 20 });
  console.log(`dbaas bench: ${INSTANCES} instances and ${OBJECTS} databases/users per engine, ${os.cpus().length} CPUs, root ${root}`);
  try {
    for (const engine of ['postgresql', 'mysql'] as const) await benchEngine(provider, engine);
    await benchHttp(root);
  } finally {
    for (const name of await provider.instanceNames()) await provider.destroyInstance(name).catch(() => undefined);
    await fs.rm(root, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
