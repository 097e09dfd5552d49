import { createProviders } from '../families';
import { loadConfig } from '../common/config';
import { Keyring } from '../common/crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { migrationSource } from '../db/migrations';
import { seedDemo } from '../db/seeds';

/** Every migration goes down and up again cleanly, and the demo seed is idempotent. */
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database?.drop());

const tables = async () =>
  (await database.db('pg_tables').where({ schemaname: 'public' }).pluck('tablename')).filter((t: string) => !t.startsWith('knex_')).sort();

describe('migrations', () => {
  it('roll all the way down and up again', async () => {
    const all = await migrationSource.getMigrations([]);
    const before = await tables();
    expect(before).toEqual(
      expect.arrayContaining(['accounts', 'api_keys', 'audit_logs', 'events', 'idempotency_keys', 'operations', 'services', 'sessions', 'users']),
    );
    await database.db.migrate.rollback(undefined, true);
    expect(await tables()).toEqual([]);
    const [, names] = await database.db.migrate.latest();
    expect(names).toHaveLength(all.length);
    expect(await tables()).toEqual(before);
  });
});

describe('demo seed', () => {
  it('creates account cus_1, both users and an active service of every family, and is idempotent', async () => {
    // The DNS simulator here; the seeded zone on a real PowerDNS is tested in test/dns.http.test.ts.
    const seedConfig = loadConfig(
      {},
      {
        SIM_DELAY_SCALE: '0',
        DNS_BACKEND: 'simulator',
        LB_BACKEND: 'simulator',
        DBAAS_BACKEND: 'simulator',
        OBJECTSTORAGE_BACKEND: 'simulator',
        CAAS_BACKEND: 'simulator',
        WORDPRESS_BACKEND: 'simulator',
      },
    );
    const keyring = Keyring.fromString('ab'.repeat(32));
    const passwords = { owner: 'owner-password-1', dev: 'dev-password-1', other: 'other-password-1' };
    // What `npm start` passes: the demo web servers it runs (none answer here; health is not the point).
    const demoBackends = [
      { ip: '127.0.0.1', port: 18081, weight: 1 },
      { ip: '127.0.0.1', port: 18082, weight: 1 },
    ];
    const first = await seedDemo(database.db, passwords, createProviders({ db: database.db, config: seedConfig }), {
      keyring,
      config: seedConfig,
      demoBackends,
    });
    expect(first.createdUsers).toBe(true);
    const counts = async () => ({
      users: Number((await database.db('users').count('* as n').first())!.n),
      services: Number((await database.db('services').count('* as n').first())!.n),
    });
    const after = await counts();
    const second = await seedDemo(database.db, passwords, createProviders({ db: database.db, config: seedConfig }), {
      keyring,
      config: seedConfig,
      demoBackends,
    });
    expect(second.createdUsers).toBe(false);
    expect(await counts()).toEqual(after);

    const account = await database.db('accounts').where({ id: 1 }).first();
    expect(account).toMatchObject({ currency: 'EUR' });
    expect(Number((await database.db('billing_accounts').where({ account_id: 1 }).first()).credit)).toBe(5);
    const users = await database.db('users').orderBy('id');
    expect(users.map((u) => [u.email, u.is_owner, Number(u.account_id)])).toEqual([
      ['owner@example.test', true, 1],
      ['dev@example.test', false, 1],
      ['other@example.test', true, 2],
    ]);
    expect(users[1].all_services).toBe(false);
    const families = new Set((await database.db('services').where({ account_id: 1, status: 'active' })).map((s) => s.family));
    for (const family of ['vps', 'dns', 'dbaas', 'caas', 'lb', 'objectstorage', 'mailgateway', 'other']) expect(families).toContain(family);
    // The seeded load balancer runs, with the demo listener in front of the demo web servers.
    const balancers = await database.db('lb_balancers');
    expect(balancers).toHaveLength(1);
    expect(balancers[0].listeners.map((l: { name: string; backends: Array<{ port: number }> }) => [l.name, l.backends.map((b) => b.port)])).toEqual([
      ['web', [18081, 18082]],
    ]);
    // One database service per engine, each with its instance (the simulator here; real servers in npm start).
    const instances = await database.db('dbaas_instances').join('services', 'services.id', 'dbaas_instances.service_id').where('services.account_id', 1);
    expect(instances.map((i) => i.engine).sort()).toEqual(['mysql', 'postgresql']);
    for (const i of instances) expect(i.ready_at).not.toBeNull();
    expect(await database.db('dns_zones').select('name')).toEqual([{ name: 'example.test' }]);
    expect(await database.db('sim_dns_rrsets').where({ zone: 'example.test' }).count('* as n').first()).toEqual({ n: 4 });
    // The mail gateway with its sending domain (pending: no DNS_RESOLVER here to verify it against).
    const mail = await database
      .db('mail_domains')
      .join('mail_gateways', 'mail_gateways.service_id', 'mail_domains.service_id')
      .where('mail_gateways.account_id', 1);
    expect(mail.map((d) => [d.domain, d.status])).toEqual([['example.test', 'pending']]);
  });
});
