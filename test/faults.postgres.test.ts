import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startFaultStack, type FaultStack } from './helpers/fault-stack';

/**
 * PostgreSQL stopped for seconds under steady traffic, with real processes (a private cluster, the
 * API and the worker as children): every answer meanwhile is `503 backend_unavailable`, never 500,
 * `GET /v1/operations/{id}` included; the audit entries of that time keep their account; recovery
 * is immediate and nothing crashes.
 */
let stack: FaultStack;
beforeAll(async () => {
  stack = await startFaultStack({ name: 'pg', postgres: 'private' });
  await Promise.all([stack.startWorker(), stack.startApi()]);
});
afterAll(() => stack?.close());

interface Answer {
  at: number;
  what: string;
  status: number;
  code: string | null;
  requestId: string | null;
}

describe('PostgreSQL stopped under load', () => {
  it('answers 503 backend_unavailable meanwhile, keeps the account on audit entries, and recovers at once', async () => {
    const vps = await stack.createVps();
    const first = await stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' } });
    expect(first.status, first.text).toBe(202);
    await eventually(
      stack,
      'the power operation',
      () => stack.db('operations').where({ id: first.body.id }).first(),
      (row) => row.status === 'succeeded',
    );

    const calls: Array<[string, () => Promise<{ status: number; body: any; headers: Headers }>]> = [
      ['GET /v1/services', () => stack.http.get('/v1/services', { token: stack.owner.key, checkContract: false })],
      ['GET /v1/operations/{id}', () => stack.http.get(`/v1/operations/${first.body.id}`, { token: stack.owner.key, checkContract: false })],
      ['GET /v1/vps/{id}', () => stack.http.get(`/v1/vps/${vps.id}`, { token: stack.owner.key, checkContract: false })],
      ['POST /v1/vps/{id}/power', () => stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' }, checkContract: false })],
      ['GET /v1/account', () => stack.http.get('/v1/account', { token: stack.owner.key, checkContract: false })],
    ];
    const answers: Answer[] = [];
    let running = true;
    const load = (async () => {
      for (let i = 0; running; i++) {
        const [what, call] = calls[i % calls.length];
        const at = Date.now();
        void call().then(
          (res) => answers.push({ at, what, status: res.status, code: res.body?.error?.code ?? null, requestId: res.headers.get('x-request-id') }),
          () => answers.push({ at, what, status: 0, code: 'no answer', requestId: null }),
        );
        await new Promise((r) => setTimeout(r, 50)); // 20 requests a second
      }
    })();

    await new Promise((r) => setTimeout(r, 1_000));
    await stack.postgres!.stop();
    const down = Date.now();
    await new Promise((r) => setTimeout(r, 6_000));
    const up = Date.now();
    await stack.postgres!.start();
    const back = Date.now();
    await new Promise((r) => setTimeout(r, 2_000));
    running = false;
    await load;
    await new Promise((r) => setTimeout(r, 1_000));

    const wrong = answers.filter((a) => a.status === 0 || (a.status >= 500 && a.status !== 503));
    expect(wrong, `${JSON.stringify(wrong)}\n${stack.logs()}`).toEqual([]);
    const during = answers.filter((a) => a.at > down + 200 && a.at < up);
    expect(during.length).toBeGreaterThan(80);
    for (const a of during) expect(a, JSON.stringify(a)).toMatchObject({ status: 503, code: 'backend_unavailable' });
    expect(new Set(during.map((a) => a.what))).toEqual(new Set(calls.map(([what]) => what)));
    // Recovery is immediate: everything asked a second after PostgreSQL is back succeeds.
    const after = answers.filter((a) => a.at > back + 1_000);
    expect(after.length).toBeGreaterThan(10);
    for (const a of after) expect([200, 202], JSON.stringify(a)).toContain(a.status);
    expect(stack.api.running && stack.worker.running).toBe(true);

    // The audit entries of the outage were kept in the API's queue, written once PostgreSQL came
    // back, and carry their account: the account's audit log shows them.
    const ids = new Set(during.map((a) => a.requestId));
    const seen = await eventually(
      stack,
      'the audit entries of the outage',
      async () => {
        const found: string[] = [];
        for (let cursor: string | null = null, page = 0; page < 20; page++) {
          const res: { body: any } = await stack.http.get(`/v1/audit-logs?limit=100&status=503${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
            token: stack.owner.key,
          });
          found.push(...res.body.data.map((e: { request_id: string }) => e.request_id).filter((id: string) => ids.has(id)));
          cursor = res.body.next_cursor;
          if (!res.body.has_more) break;
        }
        return found;
      },
      (found) => found.length === ids.size,
      20_000,
    );
    expect(seen).toHaveLength(ids.size);
    expect(
      await stack
        .db('audit_logs')
        .whereIn('request_id', [...ids])
        .whereNull('account_id'),
    ).toEqual([]);
  });
});
