import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * What a site runs on, on the simulator backend: cache flushes (with the CDN's), core updates, cron,
 * PHP settings, version and restart; every refusal with its `param`, another account's site, a
 * suspended one, and the backend's outage.
 */
let stack: Stack;
let api: ReturnType<typeof siteApi>;

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { SIM_DELAY_SCALE: '0' } });
  api = siteApi(stack);
});
afterAll(() => stack?.close());

const at = (s: TestSite, rest: string) => `/v1/wordpress/${s.id}/${rest}`;

function expectInvalid(res: { status: number; body: any; text: string }, param: string, message?: RegExp) {
  expect(res.status, res.text).toBe(400);
  expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
  if (message) expect(res.body.error.message).toMatch(message);
}

describe('cache', () => {
  it('flushes the caches, and the CDN when it is on', async () => {
    const s = await createSite(stack);
    const res = await api.post(at(s, 'cache/flush'));
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ object: 'wordpress_cache_flush', flushed: ['object'] });
    await stack.db('wordpress_sites').where({ service_id: s.serviceId }).update({ cdn_enabled: true });
    const withCdn = await api.post(at(s, 'cache/flush'));
    expect(withCdn.body).toEqual({ object: 'wordpress_cache_flush', flushed: ['object', 'cdn'] });
    const log = await stack.api.deps.providers.wordpress.logs(s.serviceId, 'error', 100);
    expect(log.filter((l) => l.message === 'cdn purged')).toHaveLength(1);
  });
});

describe('core updates', () => {
  it('shows the update, makes it with the database upgrade, then answers unchanged', async () => {
    const s = await createSite(stack);
    const before = await api.get(at(s, 'core/updates'));
    expect(before.status, before.text).toBe(200);
    expect(before.body).toEqual({ object: 'wordpress_core_updates', current_version: '6.1.9', latest_version: '6.1.10', update_available: true });
    const updated = await api.post(at(s, 'core/updates'));
    expect(updated.status, updated.text).toBe(200);
    expect(updated.body).toEqual({ object: 'wordpress_core_updates', current_version: '6.1.10', latest_version: '6.1.10', update_available: false });
    const log = await stack.api.deps.providers.wordpress.logs(s.serviceId, 'error', 100);
    expect(log.filter((l) => /database upgrade done/.test(l.message))).toHaveLength(1);
    const again = await api.post(at(s, 'core/updates'));
    expect(again.status).toBe(200);
    expect(again.body).toEqual(updated.body);
    expect((await stack.api.deps.providers.wordpress.logs(s.serviceId, 'error', 100)).filter((l) => /database upgrade done/.test(l.message))).toHaveLength(1);
    expect((await api.get(at(s, 'core/updates'))).body).toEqual(updated.body);
  });
});

describe('cron', () => {
  it('lists the events (next first, paginated), runs a hook (rescheduled), deletes one (then 404)', async () => {
    const s = await createSite(stack);
    const list = await api.get(at(s, 'cron?limit=100'));
    expect(list.status, list.text).toBe(200);
    const events = list.body.data as Array<{ object: string; hook: string; schedule: string | null; next_run_at: string }>;
    expect(events.length).toBeGreaterThan(5);
    expect(events.find((e) => e.hook === 'wp_version_check')).toEqual({
      object: 'wordpress_cron_event',
      hook: 'wp_version_check',
      schedule: 'twicedaily',
      next_run_at: expect.any(String),
    });
    const times = events.map((e) => e.next_run_at);
    expect([...times].sort()).toEqual(times);
    // Pages of two, joined, are the whole list.
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await api.get(at(s, `cron?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`));
      paged.push(...page.body.data.map((e: { hook: string }) => e.hook));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(paged).toEqual(events.map((e) => e.hook));

    const ran = await api.post(at(s, 'cron/wp_version_check/run'));
    expect(ran.status, ran.text).toBe(200);
    expect(ran.body).toEqual({ object: 'wordpress_cron_run', hook: 'wp_version_check', executed_at: expect.any(String) });
    const next = (await api.get(at(s, 'cron?limit=100'))).body.data.find((e: { hook: string }) => e.hook === 'wp_version_check');
    expect(new Date(next.next_run_at).getTime()).toBeGreaterThan(Date.now() + 43_000_000);

    const gone = await api.del(at(s, 'cron/wp_version_check'));
    expect(gone.status, gone.text).toBe(204);
    expect((await api.get(at(s, 'cron?limit=100'))).body.data.map((e: { hook: string }) => e.hook)).not.toContain('wp_version_check');
    for (const res of [await api.del(at(s, 'cron/wp_version_check')), await api.post(at(s, 'cron/no_such_hook/run'))]) {
      expect(res.status, res.text).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });

  it('refuses a hook that is not a hook name', async () => {
    const s = await createSite(stack);
    expectInvalid(await api.post(at(s, `cron/${encodeURIComponent('bad hook')}/run`)), 'hook');
    expectInvalid(await api.del(at(s, `cron/${'h'.repeat(192)}`)), 'hook');
    expectInvalid(await api.del(at(s, `cron/${encodeURIComponent('a;b')}`)), 'hook');
  });
});

describe('PHP', () => {
  it('shows the version, what is available and the settings', async () => {
    const s = await createSite(stack);
    const res = await api.get(at(s, 'php'));
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({
      object: 'wordpress_php',
      version: '8.2',
      available_versions: ['8.2'],
      settings: { memory_limit: '256M', upload_max_filesize: '64M', post_max_size: '64M', max_execution_time: 30, max_input_vars: 1000 },
    });
  });

  it('changes only the keys given', async () => {
    const s = await createSite(stack);
    const res = await api.patch(at(s, 'php'), { memory_limit: '1g', post_max_size: '128M', max_execution_time: 120 });
    expect(res.status, res.text).toBe(200);
    expect(res.body.settings).toEqual({ memory_limit: '1G', upload_max_filesize: '64M', post_max_size: '128M', max_execution_time: 120, max_input_vars: 1000 });
    const upload = await api.patch(at(s, 'php'), { upload_max_filesize: '128M' });
    expect(upload.body.settings).toMatchObject({ memory_limit: '1G', upload_max_filesize: '128M', post_max_size: '128M' });
    expect((await api.get(at(s, 'php'))).body.settings).toEqual(upload.body.settings);
    const nothing = await api.patch(at(s, 'php'), {});
    expect(nothing.status).toBe(200);
    expect(nothing.body.settings).toEqual(upload.body.settings);
  });

  it.each([
    [{ memory_limit: '63M' }, 'memory_limit'],
    [{ memory_limit: '1025M' }, 'memory_limit'],
    [{ memory_limit: '2G' }, 'memory_limit'],
    [{ memory_limit: '-1' }, 'memory_limit'],
    [{ memory_limit: 256 }, 'memory_limit'],
    [{ memory_limit: '256 M' }, 'memory_limit'],
    [{ memory_limit: null }, 'memory_limit'],
    [{ upload_max_filesize: '0M' }, 'upload_max_filesize'],
    [{ upload_max_filesize: '513M' }, 'upload_max_filesize'],
    [{ post_max_size: '1T' }, 'post_max_size'],
    [{ max_execution_time: 0 }, 'max_execution_time'],
    [{ max_execution_time: 301 }, 'max_execution_time'],
    [{ max_execution_time: 1.5 }, 'max_execution_time'],
    [{ max_execution_time: '30' }, 'max_execution_time'],
    [{ max_input_vars: 99 }, 'max_input_vars'],
    [{ max_input_vars: 100_001 }, 'max_input_vars'],
    [{ display_errors: 'On' }, 'display_errors'],
    [{ memory_limit: '128M', open_basedir: '/' }, 'open_basedir'],
    // After the change post_max_size must hold an upload: the param is the key that breaks it.
    [{ upload_max_filesize: '65M' }, 'upload_max_filesize'],
    [{ post_max_size: '32M' }, 'post_max_size'],
    [{ upload_max_filesize: '256M', post_max_size: '128M' }, 'post_max_size'],
  ])('refuses %j (param %s) and changes nothing', async (body, param) => {
    const s = await createSite(stack);
    expectInvalid(await api.patch(at(s, 'php'), body), param);
    expect((await api.get(at(s, 'php'))).body.settings).toMatchObject({ memory_limit: '256M', upload_max_filesize: '64M', post_max_size: '64M' });
  });

  it('accepts the bounds', async () => {
    const s = await createSite(stack);
    const low = await api.patch(at(s, 'php'), {
      memory_limit: '64M',
      upload_max_filesize: '1M',
      post_max_size: '1M',
      max_execution_time: 1,
      max_input_vars: 100,
    });
    expect(low.status, low.text).toBe(200);
    const high = await api.patch(at(s, 'php'), {
      memory_limit: '1024M',
      post_max_size: '512M',
      upload_max_filesize: '512M',
      max_execution_time: 300,
      max_input_vars: 100_000,
    });
    expect(high.status, high.text).toBe(200);
    expect(high.body.settings).toEqual({
      memory_limit: '1024M',
      upload_max_filesize: '512M',
      post_max_size: '512M',
      max_execution_time: 300,
      max_input_vars: 100_000,
    });
  });

  it('changes the version (settings carry over, the record follows) and refuses one that is not available', async () => {
    const s = await createSite(stack);
    await api.patch(at(s, 'php'), { memory_limit: '512M' });
    const res = await api.post(at(s, 'php/version'), { version: '8.2' });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ object: 'wordpress_php', version: '8.2', settings: { memory_limit: '512M' } });
    expect((await stack.db('wordpress_sites').where({ service_id: s.serviceId }).first()).php_version).toBe('8.2');
    expectInvalid(await api.post(at(s, 'php/version'), { version: '7.4' }), 'version', /PHP 7\.4 is not available; choose one of 8\.2/);
    expectInvalid(await api.post(at(s, 'php/version'), {}), 'version');
    expectInvalid(await api.post(at(s, 'php/version'), { version: 8.2 }), 'version');
  });

  it('restarts PHP and answers it', async () => {
    const s = await createSite(stack);
    const res = await api.post(at(s, 'php/restart'));
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ object: 'wordpress_php', version: '8.2' });
    const log = await stack.api.deps.providers.wordpress.logs(s.serviceId, 'php', 100);
    expect(log.some((l) => /Reloading in progress/.test(l.message))).toBe(true);
  });
});

describe('who may', () => {
  it("answers 404 for another account's site", async () => {
    const { accountId } = await createAccount(stack.db);
    const theirs = await createSite(stack, { accountId });
    for (const [method, path, body] of [
      ['POST', 'cache/flush'],
      ['GET', 'core/updates'],
      ['POST', 'core/updates'],
      ['GET', 'cron'],
      ['DELETE', 'cron/wp_version_check'],
      ['POST', 'cron/wp_version_check/run'],
      ['GET', 'php'],
      ['PATCH', 'php', { memory_limit: '128M' }],
      ['POST', 'php/version', { version: '8.2' }],
      ['POST', 'php/restart'],
    ] as const) {
      const res = await stack.http.request(method, at(theirs, path), { token: stack.owner.key, body });
      expect(res.status, `${method} ${path}: ${res.text}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });

  it('refuses changes on a suspended site (409) but answers reads; a site without the capability is 400', async () => {
    const s = await createSite(stack);
    await stack.db('services').where({ id: s.serviceId }).update({ status: 'suspended' });
    for (const res of [
      await api.post(at(s, 'cache/flush')),
      await api.patch(at(s, 'php'), { memory_limit: '128M' }),
      await api.post(at(s, 'cron/wp_version_check/run')),
    ]) {
      expect(res.status, res.text).toBe(409);
      expect(res.body.error.code).toBe('conflict');
    }
    expect((await api.get(at(s, 'php'))).status).toBe(200);
    const without = await createSite(stack, { capabilities: { php: false, cron: true } });
    const refused = await api.get(at(without, 'php'));
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('unsupported_for_product');
    expect((await api.get(at(without, 'cron'))).status).toBe(200);
  });

  it('answers 503 backend_unavailable while the backend is down', async () => {
    const s = await createSite(stack);
    await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: true } });
    try {
      for (const res of [
        await api.post(at(s, 'cache/flush')),
        await api.get(at(s, 'php')),
        await api.get(at(s, 'cron')),
        await api.post(at(s, 'core/updates')),
      ]) {
        expect(res.status, res.text).toBe(503);
        expect(res.body.error.code).toBe('backend_unavailable');
      }
    } finally {
      await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: false } });
    }
    expect((await api.post(at(s, 'cache/flush'))).status).toBe(200);
  });
});
