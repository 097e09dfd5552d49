import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECOVERY_HALT_AFTER } from '../domain/wordpress/keeper';
import { createAccount } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * A hosted site's mail, logs and monitoring on the simulated backend (WORDPRESS_BACKEND=simulator:
 * it sends no mail and serves nothing, so the page-speed test has nothing to measure).
 */
let stack: Stack;
let api: ReturnType<typeof siteApi>;
let site: TestSite;
const RELAY = '127.0.0.1:2525';

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { SIM_DELAY_SCALE: '0', WORDPRESS_SMTP_RELAY: RELAY } });
  api = siteApi(stack);
  site = await createSite(stack, { name: `obs-${randomBytes(3).toString('hex')}.example.test` });
}, 120_000);

afterAll(async () => {
  await stack?.close();
});

describe('email', () => {
  it('says how mail leaves and from which address', async () => {
    const res = await api.get(`/v1/wordpress/${site.id}/email`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ object: 'wordpress_email', method: 'smtp', relay: RELAY, from: `wordpress@${site.name}` });
  });

  it('sends a test mail (a diagnosis, not an error) and logs it without its body', async () => {
    for (const bad of [{}, { to: 'not-an-address' }, { to: 'a@b' }, { to: 42 }]) {
      const res = await api.post(`/v1/wordpress/${site.id}/email/test`, bad);
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'to' });
    }
    const before = Date.now();
    const res = await api.post(`/v1/wordpress/${site.id}/email/test`, { to: 'owner@example.com' });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ object: 'wordpress_email_test', result: { sent: false, detail: expect.any(String) } });
    await api.post(`/v1/wordpress/${site.id}/email/test`, { to: 'second@example.com' });

    const log = await api.get(`/v1/wordpress/${site.id}/email/log`);
    expect(log.status, log.text).toBe(200);
    expect(log.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(log.body.data).toEqual([
      { to: 'second@example.com', subject: expect.any(String), method: 'smtp', sent_at: expect.any(String) },
      { to: 'owner@example.com', subject: expect.any(String), method: 'smtp', sent_at: expect.any(String) },
    ]);
    expect(Date.parse(log.body.data[1].sent_at)).toBeGreaterThanOrEqual(before - 1000);
  });

  it('keeps only the last 7 days in the log', async () => {
    // An entry of 8 days ago, as the site would have kept it.
    await stack.db.raw(
      `update sim_wordpress_sites set state = jsonb_set(state, '{content,mail}', (state->'content'->'mail') || ?::jsonb) where service_id = ?`,
      [
        JSON.stringify([{ to: 'old@example.com', subject: 'old', method: 'smtp', sentAt: new Date(Date.now() - 8 * 86_400_000).toISOString(), sent: true }]),
        site.serviceId,
      ],
    );
    const log = await api.get(`/v1/wordpress/${site.id}/email/log`);
    expect(log.body.data.map((e: { to: string }) => e.to)).toEqual(['second@example.com', 'owner@example.com']);
  });
});

describe('logs', () => {
  it('tails one source (error by default), the last `lines`, oldest first', async () => {
    const errors = await api.get(`/v1/wordpress/${site.id}/logs`);
    expect(errors.status, errors.text).toBe(200);
    expect(errors.body.data.length).toBeGreaterThan(0);
    for (const line of errors.body.data)
      expect(line).toEqual({ timestamp: expect.any(String), source: 'error', level: expect.any(String), message: expect.any(String) });

    const php = await api.get(`/v1/wordpress/${site.id}/logs?source=php&lines=1000`);
    expect(php.body.data.length).toBeGreaterThanOrEqual(2);
    expect(php.body.data.every((l: { source: string }) => l.source === 'php')).toBe(true);
    const last = await api.get(`/v1/wordpress/${site.id}/logs?source=php&lines=1`);
    expect(last.body.data).toEqual([php.body.data.at(-1)]);
    expect((await api.get(`/v1/wordpress/${site.id}/logs?source=access`)).status).toBe(200);

    for (const [query, param] of [
      ['lines=0', 'lines'],
      ['lines=1001', 'lines'],
      ['lines=x', 'lines'],
      ['source=debug', 'source'],
    ]) {
      const res = await api.get(`/v1/wordpress/${site.id}/logs?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.error, query).toMatchObject({ code: 'validation_failed', param });
    }
  });
});

describe('monitoring', () => {
  it('shows the repairs, newest first, and halted after 3 failures in a row', async () => {
    const empty = await api.get(`/v1/wordpress/${site.id}/monitoring/recovery`);
    expect(empty.status, empty.text).toBe(200);
    expect(empty.body).toEqual({ object: 'wordpress_recovery', halted: false, events: [] });

    const at = (minutesAgo: number) => new Date(Date.now() - minutesAgo * 60_000);
    const tenAgo = at(10);
    await stack
      .db('wordpress_recovery')
      .insert({ service_id: site.serviceId, action: 'restart_php', reason: "the site's PHP was not running", ok: true, created_at: tenAgo });
    for (let i = 0; i < RECOVERY_HALT_AFTER - 1; i++) {
      await stack
        .db('wordpress_recovery')
        .insert({ service_id: site.serviceId, action: 'repair', reason: 'the site could not be brought back', ok: false, created_at: at(5 - i) });
    }
    let res = await api.get(`/v1/wordpress/${site.id}/monitoring/recovery`);
    expect(res.body.halted).toBe(false);
    expect(res.body.events.map((e: { ok: boolean }) => e.ok)).toEqual([false, false, true]);
    expect(res.body.events.at(-1)).toEqual({ action: 'restart_php', reason: "the site's PHP was not running", ok: true, at: tenAgo.toISOString() });

    await stack.db('wordpress_recovery').insert({ service_id: site.serviceId, action: 'repair', reason: 'the site could not be brought back', ok: false });
    res = await api.get(`/v1/wordpress/${site.id}/monitoring/recovery`);
    expect(res.body.halted).toBe(true);
    expect(res.body.events).toHaveLength(RECOVERY_HALT_AFTER + 1);

    // The site answers again: no longer halted.
    await stack.db('wordpress_recovery').insert({ service_id: site.serviceId, action: 'check', reason: 'the site answers again', ok: true });
    res = await api.get(`/v1/wordpress/${site.id}/monitoring/recovery`);
    expect(res.body.halted).toBe(false);
    expect(res.body.events[0]).toMatchObject({ action: 'check', ok: true });
  });

  it.skipIf(!existsSync(process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'))(
    'answers 503 for a page-speed test of a site nothing serves (the simulator)',
    async () => {
      const res = await api.get(`/v1/wordpress/${site.id}/monitoring/pagespeed`);
      expect(res.status, res.text).toBe(503);
      expect(res.body.error.code).toBe('backend_unavailable');
    },
    60_000,
  );

  it('answers 404 for another account’s site', async () => {
    const { accountId } = await createAccount(stack.db);
    const foreign = await createSite(stack, { name: `obs-foreign-${randomBytes(3).toString('hex')}.example.test`, accountId });
    for (const res of [
      await api.get(`/v1/wordpress/${foreign.id}/email`),
      await api.get(`/v1/wordpress/${foreign.id}/email/log`),
      await api.post(`/v1/wordpress/${foreign.id}/email/test`, { to: 'owner@example.com' }),
      await api.get(`/v1/wordpress/${foreign.id}/logs`),
      await api.get(`/v1/wordpress/${foreign.id}/monitoring/recovery`),
      await api.get(`/v1/wordpress/${foreign.id}/monitoring/pagespeed`),
    ]) {
      expect(res.status, res.text).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });
});
