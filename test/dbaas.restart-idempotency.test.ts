import { mkdtempSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';

/**
 * `POST /v1/dbaas/{id}/restart` restarts inside the request, which can outlive
 * IDEMPOTENCY_ABANDON_AFTER (100 ms here): the request keeps its Idempotency-Key's record held
 * while it works, so a retry with the key answers `409 idempotency_key_in_use` (and, once the
 * restart is done, replays its answer) instead of restarting the server a second time. On a real
 * PostgreSQL instance.
 */
let stack: Stack;
let root: string;
let svc: { id: string; serviceId: number };

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'dbaas-restart-'));
  stack = await startStack({ temporal: 'none', env: { DBAAS_BACKEND: 'instances', DBAAS_DATA_DIR: root, IDEMPOTENCY_ABANDON_AFTER: '100ms' } });
  await seedOrders(stack.db);
  svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product: 'dbaas-postgres-s' });
  const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
  expect(attached.status, attached.text).toBe(200);
});
afterAll(async () => {
  const adapter = new DbInstancesAdapter({ rootDir: root });
  for (const name of await adapter.instanceNames()) await adapter.destroyInstance(name).catch(() => undefined);
  await stack?.close();
  await fs.rm(root, { recursive: true, force: true });
});

describe('a restart that outlives the idempotency hold', () => {
  it('is not run again by a retry with the same Idempotency-Key', async () => {
    const restart = () => stack.http.post(`/v1/dbaas/${svc.id}/restart`, { token: stack.owner.key, headers: { 'idempotency-key': 'restart-once' } });
    const restarts = () => stack.db('operations').where({ service_id: svc.serviceId, type: 'dbaas.restart' });
    const shutdowns = async () => {
      const log = await stack.http.get(`/v1/dbaas/${svc.id}/logs?lines=1000`, { token: stack.owner.key });
      return log.body.data.filter((e: { message: string }) => /database system is shut down/.test(e.message)).length;
    };
    const before = await shutdowns();
    let firstDone = false;
    const first = restart().finally(() => (firstDone = true));
    // The request holds its key...
    for (let i = 0; !(await stack.db('idempotency_keys').where({ key: 'restart-once' }).first()); i++) {
      expect(i).toBeLessThan(200);
      await new Promise((r) => setTimeout(r, 10));
    }
    // ...and still works (a restart takes a few hundred milliseconds at least) once the hold has passed.
    await new Promise((r) => setTimeout(r, 200));
    const retry = await restart();
    expect(firstDone, 'the restart ended before the retry: this test needs a slower restart').toBe(false);
    expect(retry.status, retry.text).toBe(409);
    expect(retry.body.error).toMatchObject({ type: 'invalid_request_error', code: 'idempotency_key_in_use' });

    const answer = await first;
    expect(answer.status, answer.text).toBe(202);
    expect(answer.body).toMatchObject({ type: 'dbaas.restart', status: 'succeeded' });
    const replay = await restart();
    expect(replay.status).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.id).toBe(answer.body.id);
    // One restart: one operation, and the engine's log shows the server shut down once.
    expect(await restarts()).toHaveLength(1);
    expect(await shutdowns()).toBe(before + 1);
  });
});
