/**
 * DBaaS instance benchmark: `npx tsx bench/dbaas.bench.ts [instances] [objects]` (default 3 x 20).
 *
 * Runs the real backend (providers/dbinstances/) under a temporary root, for each engine:
 * provisions `instances` instances one after the other (initdb or mariadb-install-db, TLS
 * certificate, start, admin user), then on one of them creates and drops `objects` databases and
 * creates `objects` users, restarts it a few times and takes a few backups. Prints min, median,
 * p95 and max of each step. Needs root (the servers run as the postgres and mysql accounts).
 */
import { mkdtempSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { DbEngine } from '../providers/dbaas.provider';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';

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
    await timed(provision, () => provider.createInstance({ name, serviceId: i + 1, engine, adminUsername: 'admin', adminPassword: `bench-admin-password-${i}` }));
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

async function main() {
  const root = mkdtempSync(path.join(os.tmpdir(), 'dbaas-bench-'));
  const provider = new DbInstancesAdapter({ rootDir: root, pollIntervalMs: 20 });
  console.log(`dbaas bench: ${INSTANCES} instances and ${OBJECTS} databases/users per engine, ${os.cpus().length} CPUs, root ${root}`);
  try {
    for (const engine of ['postgresql', 'mysql'] as const) await benchEngine(provider, engine);
  } finally {
    for (const name of await provider.instanceNames()) await provider.destroyInstance(name).catch(() => undefined);
    await fs.rm(root, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
