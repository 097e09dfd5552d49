import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { provisionTargetOf } from '../domain/provisioning';
import { WordpressProvisioner } from '../domain/wordpress/provisioner';
import { lookupAccount, type OsAccount } from '../providers/os-accounts';
import { startMailCatcher } from '../scripts/mail-catcher';
import { startDnsAnswers, type DnsAnswers } from './helpers/dns-answers';
import { startStack, type Stack } from './helpers/stack';
import { waitFor } from './orders.support';
import { createSite, siteApi, type TestSite, viaNginx, sitesPort } from './wordpress.support';

/**
 * More of hosted WordPress on the real backend (WORDPRESS_BACKEND=local; test/wordpress.real.test.ts
 * has the rest): PHP settings seen by a request, a graceful restart under load, the PHP version;
 * WordPress's cron with a real plugin's event; custom domains on the real nginx with a certificate
 * of the host's CA; the CDN stand-in's cache (MISS, HIT, purge); mail through a local SMTP catcher;
 * the three logs; page speed and the keeper bringing a killed PHP back; the outage switch. One site
 * for the whole file.
 */
const SITE = 'extras.example.test';
const APEX = 'example-shop.test';

let stack: Stack;
let site: TestSite;
let api: ReturnType<typeof siteApi>;
let dns: DnsAnswers;
let catcher: { address: string; close(): Promise<void> } | null = null;
let account: OsAccount | null = null;
const dataDir = mkdtempSync(path.join(tmpdir(), 'wp-extras-'));
chmodSync(dataDir, 0o711);
const mailDir = mkdtempSync(path.join(tmpdir(), 'wp-extras-mail-'));

const siteRoot = () => path.join(dataDir, 'sites', `svc-${site.serviceId}`);
const nginxPort = () => sitesPort(stack);

/** Writes a file of the site's own (as its account would): owner the account, readable by the web server. */
function writeSiteFile(file: string, content: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, content, { mode: 0o644 });
  chmodSync(file, 0o644);
  if (account) chownSync(file, account.uid, statSync(path.dirname(file)).gid);
}

/** The customer's own PHP in wp-content: what PHP says of itself, a warning on demand, a short sleep. */
const PROBE = `<?php
header('Content-Type: application/json');
if (isset($_GET['warn'])) { trigger_error('cloud-probe warning ' . preg_replace('/[^a-z0-9-]/', '', (string) $_GET['warn']), E_USER_WARNING); }
if (isset($_GET['sleep'])) { usleep(min(500, (int) $_GET['sleep']) * 1000); }
echo json_encode(array('memory_limit' => ini_get('memory_limit'), 'pid' => getmypid()));
`;
const probe = async (query = '') => {
  const res = await viaNginx(stack, SITE, `/wp-content/cloud-probe.php${query}`);
  return { status: res.status, json: res.status === 200 ? (JSON.parse(res.body) as { memory_limit: string; pid: number }) : null };
};

function expectInvalid(res: { status: number; body: any; text?: string }, param: string) {
  expect(res.status, res.text).toBe(400);
  expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
}

beforeAll(async () => {
  dns = await startDnsAnswers();
  catcher = await startMailCatcher(mailDir);
  stack = await startStack({
    temporal: 'dev',
    env: {
      WORDPRESS_BACKEND: 'local',
      WORDPRESS_DATA_DIR: dataDir,
      WORDPRESS_HTTP_PORT: '0',
      WORDPRESS_SMTP_RELAY: catcher.address,
      WORDPRESS_KEEPER_INTERVAL: '1s',
      DBAAS_BACKEND: 'instances',
      DNS_RESOLVER: dns.address,
      ALLOW_INSECURE_TARGETS: '1',
      OPERATION_CACHE_TTL: '100ms',
    },
  });
  api = siteApi(stack);
  site = await createSite(stack, { name: SITE });
  const state = JSON.parse(readFileSync(path.join(siteRoot(), 'state.json'), 'utf8')) as { account: string | null };
  account = state.account ? await lookupAccount(state.account) : null;
  writeSiteFile(path.join(siteRoot(), 'public', 'wp-content', 'cloud-probe.php'), PROBE);
}, 300_000);

afterAll(async () => {
  if (stack) {
    await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: false } }).catch(() => undefined);
    const provisioner = new WordpressProvisioner(stack.db, stack.api.deps.providers, stack.api.deps.keyring);
    const target = site ? await provisionTargetOf(stack.db, site.serviceId) : null;
    if (target) await provisioner.deprovision(target).catch(() => undefined);
    await (stack.api.deps.providers.wordpress as unknown as { stopAll(): Promise<void> }).stopAll().catch(() => undefined);
  }
  await stack?.close();
  await catcher?.close().catch(() => undefined);
  await dns?.close();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(mailDir, { recursive: true, force: true });
}, 180_000);

describe('PHP on a real site', () => {
  it('a memory_limit change is in the pool and seen by a request', async () => {
    expect((await probe()).json?.memory_limit).toBe('256M');
    const changed = await api.patch(`/v1/wordpress/${site.id}/php`, { memory_limit: '192M' });
    expect(changed.status, changed.text).toBe(200);
    expect(changed.body.settings.memory_limit).toBe('192M');
    expect(readFileSync(path.join(siteRoot(), 'php', 'php-fpm.conf'), 'utf8')).toContain('php_admin_value[memory_limit] = 192M');
    expect((await probe()).json?.memory_limit).toBe('192M');
  }, 60_000);

  it('a restart while requests run drops none', async () => {
    const recoveryBefore = await stack.db('wordpress_recovery').where({ service_id: site.serviceId }).count({ n: '*' });
    let running = true;
    const statuses: number[] = [];
    const pids: number[] = [];
    const loop = async () => {
      while (running) {
        const answer = await probe('?sleep=40').catch(() => ({ status: 0, json: null }));
        statuses.push(answer.status);
        if (answer.json) pids.push(answer.json.pid);
      }
    };
    const loops = [loop(), loop(), loop(), loop()];
    await new Promise((r) => setTimeout(r, 300));
    const workersBefore = new Set(pids);
    const restarted = await api.post(`/v1/wordpress/${site.id}/php/restart`);
    expect(restarted.status, restarted.text).toBe(200);
    const again = await api.post(`/v1/wordpress/${site.id}/php/restart`);
    expect(again.status, again.text).toBe(200);
    await new Promise((r) => setTimeout(r, 300));
    running = false;
    await Promise.all(loops);
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(restarted.body.settings.memory_limit).toBe('192M');
    // The workers were replaced.
    expect(pids.slice(-4).some((p) => !workersBefore.has(p))).toBe(true);
    // A restart of the customer's is not a repair: the keeper (every second here) records nothing.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await stack.db('wordpress_recovery').where({ service_id: site.serviceId }).count({ n: '*' })).toEqual(recoveryBefore);
  }, 60_000);

  it('the version: the same one keeps the settings; one not installed is refused', async () => {
    const same = await api.post(`/v1/wordpress/${site.id}/php/version`, { version: '8.2' });
    expect(same.status, same.text).toBe(200);
    expect(same.body).toMatchObject({ version: '8.2', settings: { memory_limit: '192M' } });
    expect((await probe()).json?.memory_limit).toBe('192M');
    expectInvalid(await api.post(`/v1/wordpress/${site.id}/php/version`, { version: '7.4' }), 'version');
    expect((await api.get(`/v1/wordpress/${site.id}/php`)).body).toMatchObject({ version: '8.2', settings: { memory_limit: '192M' } });
  }, 60_000);
});

describe("WordPress's cron on a real site", () => {
  it("cloud-hello's hourly event: listed, run (its counter moves), removed", async () => {
    const installed = await api.post(`/v1/wordpress/${site.id}/plugins`, { slug: 'cloud-hello', version: '1.1.0' });
    expect(installed.status, installed.text).toBe(201);
    expect(installed.body).toMatchObject({ slug: 'cloud-hello', active: true });
    const listed = await api.get(`/v1/wordpress/${site.id}/cron?limit=100`);
    expect(listed.status, listed.text).toBe(200);
    expect(listed.body.data).toContainEqual(expect.objectContaining({ object: 'wordpress_cron_event', hook: 'cloud_hello_tick', schedule: 'hourly' }));
    const ticks = async () => Number((await stack.api.deps.providers.wordpress.getOption(site.serviceId, 'cloud_hello_ticks')) ?? 0);
    const before = await ticks();
    const ran = await api.post(`/v1/wordpress/${site.id}/cron/cloud_hello_tick/run`);
    expect(ran.status, ran.text).toBe(200);
    expect(ran.body).toMatchObject({ object: 'wordpress_cron_run', hook: 'cloud_hello_tick' });
    expect(await ticks()).toBe(before + 1);
    // A recurring event is scheduled again.
    expect((await api.get(`/v1/wordpress/${site.id}/cron?limit=100`)).body.data.map((e: { hook: string }) => e.hook)).toContain('cloud_hello_tick');
    const removed = await api.del(`/v1/wordpress/${site.id}/cron/cloud_hello_tick`);
    expect(removed.status, removed.text).toBe(204);
    expect((await api.get(`/v1/wordpress/${site.id}/cron?limit=100`)).body.data.map((e: { hook: string }) => e.hook)).not.toContain('cloud_hello_tick');
    expect((await api.post(`/v1/wordpress/${site.id}/cron/cloud_hello_tick/run`)).status).toBe(404);
    expect((await api.del(`/v1/wordpress/${site.id}/cron/cloud_hello_tick`)).status).toBe(404);
    expect(await ticks()).toBe(before + 1);
  }, 120_000);
});

describe('custom domains on the real nginx', () => {
  const confFile = () => path.join(dataDir, 'nginx', 'sites', `svc-${site.serviceId}.conf`);
  const home = () => stack.api.deps.providers.wordpress.getOption(site.serviceId, 'home');

  it('refuses hostile names and leaves the configuration alone', async () => {
    const before = readFileSync(confFile(), 'utf8');
    for (const domain of ['evil.test; include /etc/passwd', 'a b.test', 'x.test\nlisten', 'x.test}', '$host.test', '*.example-shop.test']) {
      expectInvalid(await api.post(`/v1/wordpress/${site.id}/domains`, { domain, force: true }), 'domain');
    }
    expect(readFileSync(confFile(), 'utf8')).toBe(before);
  }, 60_000);

  it('an apex: served with its www. form, a certificate of the host CA, primary, then removed', async () => {
    dns.set(APEX, '127.0.0.1');
    dns.set(`www.${APEX}`, '127.0.0.1');
    expect((await viaNginx(stack, `www.${APEX}`)).status).toBe(404);
    const added = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: APEX });
    expect(added.status, added.text).toBe(201);
    expect(added.body).toMatchObject({ domain: APEX, primary: true, platform: false, certificate_status: 'active' });
    expect(added.body.dns_records).toEqual([
      { type: 'A', host: APEX, value: '127.0.0.1' },
      { type: 'A', host: `www.${APEX}`, value: '127.0.0.1' },
    ]);
    expect(readFileSync(confFile(), 'utf8')).toMatch(new RegExp(`server_name [^;]*\\bwww\\.${APEX.replace('.', '\\.')}\\b`));

    // The certificate: issued by the host's CA, both names, the key root's alone.
    const cert = path.join(siteRoot(), 'certs', `${APEX}.crt`);
    const out = execFileSync('openssl', ['verify', '-CAfile', path.join(dataDir, 'ca', 'ca.crt'), cert], { encoding: 'utf8' });
    expect(out.trim()).toBe(`${cert}: OK`);
    expect(new X509Certificate(readFileSync(cert)).subjectAltName).toBe(`DNS:${APEX}, DNS:www.${APEX}`);
    expect(statSync(path.join(siteRoot(), 'certs', `${APEX}.key`)).mode & 0o777).toBe(0o600);

    // Primary: home is the www. form, and the page's links use it.
    expect(await home()).toBe(`http://www.${APEX}`);
    const page = await viaNginx(stack, `www.${APEX}`);
    expect(page.status, page.body.slice(0, 300)).toBe(200);
    expect(page.body).toContain(`http://www.${APEX}/`);
    expect(page.body).not.toContain(`http://${SITE}/`);
    // The apex itself is served too: WordPress sends it to the primary form.
    const apex = await viaNginx(stack, APEX);
    expect(apex.status).toBe(301);
    expect(apex.headers.location).toBe(`http://www.${APEX}/`);
    const domains = (await api.get(`/v1/wordpress/${site.id}/domains`)).body.data as Array<{ id: string; domain: string; platform: boolean }>;
    const platform = domains.find((d) => d.platform)!;
    const custom = domains.find((d) => d.domain === APEX)!;

    // Back to the platform hostname and again to the domain.
    const back = await api.post(`/v1/wordpress/${site.id}/domains/${platform.id}/primary`);
    expect(back.status, back.text).toBe(200);
    expect(await home()).toBe(`http://${SITE}`);
    expect((await viaNginx(stack, SITE)).body).toContain(`http://${SITE}/`);
    expect((await api.post(`/v1/wordpress/${site.id}/domains/${custom.id}/primary`)).status).toBe(200);
    expect(await home()).toBe(`http://www.${APEX}`);
    expect((await viaNginx(stack, `www.${APEX}`)).body).toContain(`http://www.${APEX}/`);

    const removed = await api.del(`/v1/wordpress/${site.id}/domains/${custom.id}`);
    expect(removed.status, removed.text).toBe(204);
    expect((await viaNginx(stack, `www.${APEX}`)).status).toBe(404);
    expect((await viaNginx(stack, APEX)).status).toBe(404);
    expect(await home()).toBe(`http://${SITE}`);
    expect(existsSync(cert)).toBe(false);
    expect((await viaNginx(stack, SITE)).status).toBe(200);
  }, 120_000);
});

describe('the CDN stand-in', () => {
  it("rewrites the uploads' URLs, caches (MISS, HIT), purges, and stops", async () => {
    const file = path.join(siteRoot(), 'public', 'wp-content', 'uploads', 'cdnprobe.txt');
    writeSiteFile(file, 'first version\n');
    const own = `http://${SITE}/wp-content/uploads/cdnprobe.txt`;
    await stack.api.deps.providers.wordpress.updateOptions(site.serviceId, { blogdescription: `Media at ${own}` });
    expect((await viaNginx(stack, SITE)).body).toContain(own);

    const enabled = await api.post(`/v1/wordpress/${site.id}/cdn/enable`);
    expect(enabled.status, enabled.text).toBe(200);
    expect(enabled.body.url).toBe(`http://127.0.0.1:${nginxPort()}/_cdn/svc_${site.serviceId}`);
    const cdn = `${enabled.body.url}/wp-content/uploads/cdnprobe.txt`;
    const page = (await viaNginx(stack, SITE)).body;
    expect(page).toContain(cdn);
    expect(page).not.toContain(own);

    const get = async () => {
      const res = await fetch(cdn);
      return { status: res.status, cache: res.headers.get('x-cache-status'), body: await res.text() };
    };
    expect(await get()).toEqual({ status: 200, cache: 'MISS', body: 'first version\n' });
    expect(await get()).toEqual({ status: 200, cache: 'HIT', body: 'first version\n' });
    writeSiteFile(file, 'second version\n');
    expect(await get()).toEqual({ status: 200, cache: 'HIT', body: 'first version\n' });
    const purged = await api.post(`/v1/wordpress/${site.id}/cdn/purge`);
    expect(purged.status, purged.text).toBe(200);
    expect(await get()).toEqual({ status: 200, cache: 'MISS', body: 'second version\n' });
    expect(await get()).toEqual({ status: 200, cache: 'HIT', body: 'second version\n' });
    // PHP under uploads is never run through the CDN.
    expect((await fetch(`${enabled.body.url}/wp-content/uploads/x.php`)).status).toBe(403);

    const disabled = await api.post(`/v1/wordpress/${site.id}/cdn/disable`);
    expect(disabled.status, disabled.text).toBe(200);
    expect(disabled.body).toMatchObject({ enabled: false, url: null });
    const after = (await viaNginx(stack, SITE)).body;
    expect(after).toContain(own);
    expect(after).not.toContain('/_cdn/');
    expect((await fetch(cdn)).status).toBe(404);
  }, 120_000);
});

describe('mail through the relay', () => {
  it('a test mail reaches the catcher and the log (no body); with the relay gone, sent is false with a reason', async () => {
    const sent = await api.post(`/v1/wordpress/${site.id}/email/test`, { to: 'owner@example.com' });
    expect(sent.status, sent.text).toBe(200);
    expect(sent.body.result.sent, sent.body.result.detail).toBe(true);
    const kept = readdirSync(mailDir).filter((f) => f.endsWith('.eml'));
    expect(kept).toHaveLength(1);
    const eml = readFileSync(path.join(mailDir, kept[0]), 'utf8');
    expect(eml).toMatch(/^To: owner@example\.com/m);
    expect(eml).toMatch(/^Subject: Test message from /m);
    expect(eml).toMatch(/^From: .*wordpress@extras\.example\.test/m);

    const log = await api.get(`/v1/wordpress/${site.id}/email/log`);
    expect(log.status, log.text).toBe(200);
    expect(log.body.data[0]).toEqual({
      to: 'owner@example.com',
      subject: expect.stringMatching(/^Test message from /),
      method: 'smtp',
      sent_at: expect.any(String),
    });

    await catcher!.close();
    catcher = null;
    const failed = await api.post(`/v1/wordpress/${site.id}/email/test`, { to: 'owner@example.com' });
    expect(failed.status, failed.text).toBe(200);
    expect(failed.body.result.sent).toBe(false);
    expect(failed.body.result.detail).toMatch(/connect/i);
    expect((await api.get(`/v1/wordpress/${site.id}/email/log`)).body.data).toHaveLength(2);
  }, 60_000);
});

describe('logs', () => {
  it('access (paths without query strings), error and php', async () => {
    await viaNginx(stack, SITE, '/extras-log-probe/?token=do-not-log-me');
    const access = await api.get(`/v1/wordpress/${site.id}/logs?source=access&lines=20`);
    expect(access.status, access.text).toBe(200);
    const messages = access.body.data.map((l: { message: string }) => l.message) as string[];
    expect(messages.some((m) => / GET \/extras-log-probe\/ /.test(m))).toBe(true);
    expect(JSON.stringify(access.body)).not.toContain('do-not-log-me');
    expect(access.body.data.at(-1)).toMatchObject({ source: 'access', level: expect.any(String) });

    expect((await viaNginx(stack, SITE, '/.extras-hidden')).status).toBe(403);
    const error = await api.get(`/v1/wordpress/${site.id}/logs?source=error&lines=20`);
    expect(error.status, error.text).toBe(200);
    expect(error.body.data).toContainEqual(
      expect.objectContaining({ source: 'error', level: 'error', message: expect.stringContaining('access forbidden by rule') }),
    );

    expect((await probe('?warn=extras-php-probe')).status).toBe(200);
    const php = await waitFor(
      () => api.get(`/v1/wordpress/${site.id}/logs?source=php&lines=50`),
      (r) => JSON.stringify(r.body).includes('cloud-probe warning extras-php-probe'),
      5_000,
    );
    expect(php.body.data).toContainEqual(
      expect.objectContaining({ source: 'php', level: 'warning', message: expect.stringContaining('cloud-probe warning extras-php-probe') }),
    );
  }, 60_000);
});

describe('monitoring', () => {
  it('page speed: numbers for mobile and desktop', async () => {
    const res = await api.get(`/v1/wordpress/${site.id}/monitoring/pagespeed`);
    expect(res.status, res.text).toBe(200);
    for (const form of ['mobile', 'desktop']) {
      expect(res.body[form].score).toBeGreaterThanOrEqual(0);
      expect(res.body[form].score).toBeLessThanOrEqual(100);
      expect(res.body[form].fcp_ms).toBeGreaterThan(0);
      expect(res.body[form].requests).toBeGreaterThanOrEqual(1);
    }
  }, 60_000);

  it('a killed PHP master: the keeper starts it again and records it; the site answers', async () => {
    const pidfile = path.join(siteRoot(), 'php', 'php-fpm.pid');
    const pid = Number(readFileSync(pidfile, 'utf8').trim());
    const lastBefore = (await stack.db('wordpress_recovery').where({ service_id: site.serviceId }).max({ id: 'id' }))[0].id ?? 0;
    process.kill(pid, 'SIGKILL');
    const recovered = await waitFor(
      () => api.get(`/v1/wordpress/${site.id}/monitoring/recovery`),
      (r) => r.body.events?.some((e: { action: string }) => e.action === 'restart_php'),
      20_000,
      250,
    );
    expect(recovered.body.halted).toBe(false);
    expect(recovered.body.events[0]).toMatchObject({ action: 'restart_php', ok: true, reason: expect.any(String) });
    const rows = await stack.db('wordpress_recovery').where({ service_id: site.serviceId }).where('id', '>', lastBefore);
    expect(rows.map((r: { action: string }) => r.action)).toEqual(['restart_php']);
    const newPid = Number(readFileSync(pidfile, 'utf8').trim());
    expect(newPid).not.toBe(pid);
    const answer = await probe();
    expect(answer.status).toBe(200);
    expect(answer.json?.memory_limit).toBe('192M');
    expect((await viaNginx(stack, SITE)).status).toBe(200);
  }, 60_000);
});

describe('the outage switch', () => {
  it('while down: the site reads with live null, a flush is 503; back up after', async () => {
    try {
      expect((await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: true } })).status).toBe(200);
      const got = await api.get(`/v1/wordpress/${site.id}`);
      expect(got.status, got.text).toBe(200);
      expect(got.body.live).toBeNull();
      const flush = await api.post(`/v1/wordpress/${site.id}/cache/flush`);
      expect(flush.status, flush.text).toBe(503);
    } finally {
      await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: false } });
    }
    const up = await api.get(`/v1/wordpress/${site.id}`);
    expect(up.body.live).toMatchObject({ state: 'up' });
    expect((await api.post(`/v1/wordpress/${site.id}/cache/flush`)).status).toBe(200);
  }, 60_000);
});
