import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import knexFactory from 'knex';
import { BackendUnavailableError } from '../providers/errors';
import { PostgresKvStore } from '../providers/simulator/kv.simulator';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { describeKvContract } from './kv.contract';

/** The PostgreSQL fallback of the kv primitive (KV_BACKEND=simulator) keeps the store contract. */
let database: TestDatabase;
let store: PostgresKvStore;

beforeAll(async () => {
  database = await createTestDatabase();
  store = new PostgresKvStore(database.db);
});
afterAll(async () => {
  await store?.close();
  await database?.drop();
});

describeKvContract('postgresql', () => store);

describe('kv simulator: outages', () => {
  it('answers BackendUnavailableError when its database does not answer', async () => {
    const url = new URL(database.url);
    url.port = '1'; // nothing listens there
    const quiet = () => undefined;
    const down = knexFactory({
      client: 'pg',
      connection: url.toString(),
      pool: { min: 0, max: 1 },
      acquireConnectionTimeout: 500,
      log: { warn: quiet, error: quiet, debug: quiet, deprecate: quiet },
    });
    try {
      const unreachable = new PostgresKvStore(down);
      await expect(unreachable.get('t1', 'app', Buffer.from('k'))).rejects.toBeInstanceOf(BackendUnavailableError);
      await expect(unreachable.put('t1', 'app', Buffer.from('k'), Buffer.from('v'))).rejects.toBeInstanceOf(BackendUnavailableError);
    } finally {
      await down.destroy();
    }
  });
});
