import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { presentService } from '../domain/services';
import { presentOperation } from '../domain/operations/contract';
import { newUlidId, ulid } from '../common/ids';
import { ReadBatcher } from '../db/read-batcher';

/**
 * The request path's fast reads (docs/benchmarks.md) answer exactly what the query builder and
 * the presenters answered: the services list (prepared, dates formatted by PostgreSQL, reads of
 * concurrent requests batched into one statement) and the operation row; and concurrent requests
 * of different accounts and visibilities batched together each get their own rows only.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
});
afterAll(() => stack?.close());

async function account(services: Array<Parameters<typeof createService>[2]>) {
  const { accountId } = await createAccount(stack.db);
  const { userId } = await createUser(stack.db, accountId, { isOwner: true });
  const ids: number[] = [];
  for (const s of services) ids.push(Number((await createService(stack.db, accountId, s)).id.slice(4)));
  // Timestamps with microseconds and dates, as PostgreSQL holds them.
  for (const [i, id] of ids.entries()) {
    await stack
      .db('services')
      .where({ id })
      .update({
        created_at: `2026-0${(i % 9) + 1}-1${i % 10}T0${i % 10}:1${i % 10}:2${i % 10}.${String(123457 + i * 111111).slice(0, 6)}Z`,
        next_due_date: i % 3 ? `2027-0${(i % 9) + 1}-2${i % 10}` : null,
      });
  }
  return { accountId, userId, ids };
}

describe('GET /v1/services', () => {
  it('answers what the query builder and presentService answered, page by page, filtered and restricted', async () => {
    const a = await account([
      { family: 'vps' },
      { family: 'dns' },
      { family: 'vps', status: 'suspended' },
      { family: 'teleport' },
      { family: 'vps' },
      { family: 'dns' },
      { family: 'vps' },
    ]);
    const restricted = await createApiKey(stack.db, a.accountId, a.userId, { scopes: ['services:read'], allowlist: [a.ids[0], a.ids[2], a.ids[4], a.ids[6]] });
    const all = await createApiKey(stack.db, a.accountId, a.userId, { scopes: ['services:read'] });
    for (const [token, visible] of [
      [all.token, a.ids],
      [restricted.token, [a.ids[0], a.ids[2], a.ids[4], a.ids[6]]],
    ] as const) {
      for (const query of ['', '&family=vps', '&status=suspended', '&family=vps&status=active']) {
        const rows = await stack.db('services').whereIn('id', visible).orderBy('id', 'desc');
        const expected = rows
          .filter((r) => !query.includes('family=') || r.family === 'vps')
          .filter((r) => !query.includes('status=') || r.status === /status=(\w+)/.exec(query)![1])
          .map(presentService);
        const got: unknown[] = [];
        let cursor: string | null = null;
        do {
          const res: any = await stack.http.get(`/v1/services?limit=2${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token });
          expect(res.status, res.text).toBe(200);
          got.push(...res.body.data);
          cursor = res.body.next_cursor;
        } while (cursor);
        expect(got, `${query} ${visible.length}`).toEqual(expected);
      }
    }
  });

  it('concurrent requests of different accounts and keys, read in one batch, each get their own services', async () => {
    const tenants = await Promise.all([account([{}, {}, {}]), account([{}, {}]), account([{ family: 'dns' }, {}, {}, {}])]);
    const keys = await Promise.all(
      tenants.flatMap((t) => [
        createApiKey(stack.db, t.accountId, t.userId, { scopes: ['services:read'] }).then((k) => ({ k, ids: t.ids })),
        createApiKey(stack.db, t.accountId, t.userId, { scopes: ['services:read'], allowlist: [t.ids[1]] }).then((k) => ({ k, ids: [t.ids[1]] })),
      ]),
    );
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) => keys[i % keys.length]).map(async ({ k, ids }) => ({
        ids,
        got: (await stack.http.get('/v1/services', { token: k.token })).body.data.map((s: { id: string }) => Number(s.id.slice(4))),
      })),
    );
    for (const { ids, got } of answers) expect(got).toEqual([...ids].sort((x, y) => y - x));
  });

  it('serves a page held from an earlier read only while nothing on it changed: every change shows in the next answer', async () => {
    const a = await account([{ family: 'vps' }, { family: 'vps' }, { family: 'vps' }, { family: 'dns' }]);
    const key = await createApiKey(stack.db, a.accountId, a.userId, { scopes: ['services:read'] });
    const page = async (query = '') => {
      const res = await stack.http.get(`/v1/services?limit=2${query}`, { token: key.token });
      expect(res.status, res.text).toBe(200);
      return res.body;
    };
    const expected = async (family?: string) => {
      const rows = await stack
        .db('services')
        .where({ account_id: a.accountId, ...(family ? { family } : {}) })
        .orderBy('id', 'desc');
      return rows.slice(0, 2).map(presentService);
    };
    const first = await page();
    expect(await page()).toEqual(first); // held: the same answer
    const changes: Array<[string, () => Promise<unknown>]> = [
      ['a label changes', () => stack.db('services').where({ id: a.ids[3] }).update({ label: 'renamed' })],
      ['a status changes', () => stack.db('services').where({ id: a.ids[2] }).update({ status: 'suspended' })],
      ['an update that writes the same values', () => stack.db('services').where({ id: a.ids[3] }).update({ label: 'renamed' })],
      ['a newer service appears', () => createService(stack.db, a.accountId, { family: 'vps' })],
      [
        'the newest service goes',
        async () =>
          stack
            .db('services')
            .where({ account_id: a.accountId })
            .orderBy('id', 'desc')
            .first()
            .then((r) => stack.db('services').where({ id: r.id }).delete()),
      ],
    ];
    for (const [what, change] of changes) {
      const before = await page();
      await change();
      const after = await page();
      expect(after.data, what).toEqual(await expected());
      if (what !== 'an update that writes the same values') expect(after, what).not.toEqual(before);
    }
    // A filter's page: a service entering it through the filter shows at once.
    expect((await page('&family=dns')).data).toEqual(await expected('dns'));
    await stack.db('services').where({ id: a.ids[0] }).update({ family: 'dns' });
    expect((await page('&family=dns')).data).toEqual(await expected('dns'));
    expect((await page('&family=dns')).data.map((s: { id: string }) => s.id)).toContain(`svc_${a.ids[0]}`);
  });

  it('refuses a cursor that does not carry a service id', async () => {
    const res = await stack.http.get('/v1/services?cursor=abc.def', { token: stack.owner.key });
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe('cursor');
  });
});

describe('GET /v1/operations/{id}', () => {
  it('answers a finished operation as presentOperation does from the stored row', async () => {
    for (const completed of ['2026-11-22T10:00:01.987654Z', null]) {
      const id = newUlidId('op');
      await stack.db('operations').insert({
        id,
        account_id: stack.owner.accountId,
        type: 'vps.power',
        status: completed ? 'succeeded' : 'failed',
        progress: 100,
        resource_object: 'vps',
        resource_id: 'svc_1',
        result: JSON.stringify({ ok: true }),
        error: JSON.stringify(null),
        created_at: '2026-11-22T10:00:00.123456Z',
        completed_at: completed,
      });
      const res = await stack.http.get(`/v1/operations/${id}`, { token: stack.owner.key });
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual(presentOperation(await stack.db('operations').where({ id }).first()));
      expect(res.body.created_at).toBe('2026-11-22T10:00:00.123Z');
    }
    expect((await stack.http.get(`/v1/operations/${newUlidId('op')}`, { token: stack.owner.key })).status).toBe(404);
  });
});

describe('ReadBatcher', () => {
  it('answers the loads of one turn of the event loop with one call, each with its rows; a failure reaches each', async () => {
    const calls: number[][] = [];
    const batcher = new ReadBatcher<number, string>(async (keys) => {
      calls.push(keys);
      if (keys.includes(-1)) throw new Error('boom');
      return keys.flatMap((k, n) => Array.from({ length: k }, (_, i) => ({ n, row: `${k}.${i}` })));
    });
    expect(await Promise.all([batcher.load(2), batcher.load(0), batcher.load(3)])).toEqual([['2.0', '2.1'], [], ['3.0', '3.1', '3.2']]);
    expect(calls).toEqual([[2, 0, 3]]);
    const results = await Promise.allSettled([batcher.load(1), batcher.load(-1)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  });

  it('keeps at most maxInFlight batches out; loads made meanwhile go together in the next batch once one returns', async () => {
    const calls: number[][] = [];
    const gates: Array<() => void> = [];
    const batcher = new ReadBatcher<number, number>(async (keys) => {
      calls.push(keys);
      await new Promise<void>((resolve) => gates.push(resolve));
      return keys.map((k, n) => ({ n, row: k }));
    }, 2);
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    const loads = [batcher.load(1)];
    await turn();
    loads.push(batcher.load(2));
    await turn();
    for (const k of [3, 4, 5]) {
      loads.push(batcher.load(k));
      await turn();
    }
    expect(calls).toEqual([[1], [2]]); // two out; 3, 4 and 5 wait
    gates.shift()!();
    await loads[0];
    await turn();
    expect(calls).toEqual([[1], [2], [3, 4, 5]]);
    while (gates.length) gates.shift()!();
    expect(await Promise.all(loads)).toEqual([[1], [2], [3], [4], [5]]);
  });
});

describe('ulid', () => {
  it('is a 26-character Crockford ULID of the current time, unique and increasing within a process', () => {
    const ids = Array.from({ length: 50_000 }, () => ulid());
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    for (const id of ids.slice(0, 100)) expect(id).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
    const decoded = [...ids[0].slice(0, 10)].reduce((t, c) => t * 32 + '0123456789ABCDEFGHJKMNPQRSTVWXYZ'.indexOf(c), 0);
    expect(Math.abs(decoded - Date.now())).toBeLessThan(5_000);
    // A clock that goes back keeps the order.
    const later = ulid(Date.now() + 60_000);
    expect(ulid(Date.now()) > later).toBe(true);
  });
});
