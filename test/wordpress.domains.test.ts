import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { isSiteNameTaken } from '../domain/orders/store';
import { provisionTargetOf } from '../domain/provisioning';
import { CERT_FAILURES_PER_HOUR } from '../domain/wordpress/domains';
import { WordpressProvisioner } from '../domain/wordpress/provisioner';
import { startDnsAnswers, type DnsAnswers } from './helpers/dns-answers';
import { createAccount } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder } from './orders.support';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * A hosted site's domains, certificates, CDN and edge proxy on the simulated backend
 * (WORDPRESS_BACKEND=simulator), with "does it point here" answered by a DNS server of the test's
 * own (DNS_RESOLVER).
 */
let stack: Stack;
let dns: DnsAnswers;
let api: ReturnType<typeof siteApi>;
let site: TestSite;
const IP = '127.0.0.1';
const tag = randomBytes(3).toString('hex');
const name = (label: string) => `${label}-${tag}.example.test`;

const simState = async (serviceId: number) =>
  (await stack.db('sim_wordpress_sites').where({ service_id: serviceId }).first()).state as {
    hosts: string[];
    primary: string;
    cdnUrl: string | null;
    cdnPurges?: number;
    certificates?: Record<string, { names: string[]; notAfter: string }>;
    content: { options: Record<string, unknown> };
  };

async function domainsOf(s: TestSite) {
  const res = await api.get(`/v1/wordpress/${s.id}/domains`);
  expect(res.status, res.text).toBe(200);
  return res.body.data as Array<{ id: string; domain: string; platform: boolean; primary: boolean; certificate_status: string }>;
}

const domainId = async (s: TestSite, domain: string) => (await domainsOf(s)).find((d) => d.domain === domain)!.id;

beforeAll(async () => {
  dns = await startDnsAnswers();
  stack = await startStack({ temporal: 'none', env: { DNS_RESOLVER: dns.address, SIM_DELAY_SCALE: '0' } });
  api = siteApi(stack);
  site = await createSite(stack, { name: name('blog') });
}, 120_000);

afterAll(async () => {
  await dns?.close();
  await stack?.close();
});

describe('domains', () => {
  it('starts with the platform hostname, primary, without a certificate', async () => {
    expect(await domainsOf(site)).toEqual([
      { object: 'wordpress_domain', id: expect.stringMatching(/^dom_\d+$/), domain: site.name, platform: true, primary: true, certificate_status: 'none' },
    ]);
  });

  it('refuses a domain that does not point here, and bad names, storing nothing', async () => {
    const shop = name('notyet');
    const missing = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: shop });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: 'domain_not_pointed', param: 'domain' });
    expect(missing.body.error.message).toContain('no A record');
    dns.set(shop, '10.1.2.3');
    const elsewhere = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: shop });
    expect(elsewhere.body.error).toMatchObject({ code: 'domain_not_pointed', param: 'domain' });
    expect(elsewhere.body.error.message).toContain(`10.1.2.3 do not include ${IP}`);

    for (const bad of [
      '1.2.3.4',
      'localhost',
      `x-${tag}.localhost`,
      'co.uk',
      'bad_name.example.test',
      'nodots',
      `https://${shop}/`,
      '*.example.test',
      `a.${tag}.cloud.test`,
    ]) {
      const res = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: bad, force: true });
      expect(res.status, bad).toBe(400);
      expect(res.body.error, bad).toMatchObject({ code: 'validation_failed', param: 'domain' });
    }
    expect((await api.post(`/v1/wordpress/${site.id}/domains`, {})).body.error).toMatchObject({ code: 'validation_failed', param: 'domain' });
    expect((await api.post(`/v1/wordpress/${site.id}/domains`, { domain: shop, force: 'yes' })).body.error).toMatchObject({ param: 'force' });
    expect(await domainsOf(site)).toHaveLength(1);
  });

  it('adds a pointed domain: first custom one becomes primary, URLs rewritten, certificate issued', async () => {
    const shop = name('shop');
    dns.set(shop, IP);
    const res = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: `${shop.toUpperCase()}.` });
    expect(res.status, res.text).toBe(201);
    expect(res.body).toEqual({
      object: 'wordpress_domain',
      id: expect.stringMatching(/^dom_\d+$/),
      domain: shop,
      platform: false,
      primary: true,
      certificate_status: 'active',
      dns_records: [{ type: 'A', host: shop, value: IP }],
    });
    const list = await domainsOf(site);
    expect(list.map((d) => [d.domain, d.primary])).toEqual([
      [site.name, false],
      [shop, true],
    ]);
    const state = await simState(site.serviceId);
    expect(state.content.options.home).toBe(`http://${shop}`);
    expect(state.content.options.siteurl).toBe(`http://${shop}`);
    expect(state.hosts.sort()).toEqual([site.name, shop].sort());
    expect(state.certificates?.[shop]?.names).toEqual([shop]);
    const got = await api.get(`/v1/wordpress/${site.id}`);
    expect(got.body).toMatchObject({ primary_domain: shop, url: `http://${shop}` });

    // The same name again (any case), or the platform hostname: already this site's.
    for (const again of [shop, shop.toUpperCase(), site.name]) {
      const dup = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: again, force: true });
      expect(dup.status).toBe(409);
      expect(dup.body.error).toMatchObject({ code: 'already_exists', param: 'domain' });
    }
  });

  it('adds an apex with its www. form (both must point here); making it primary uses www.', async () => {
    const apex = `apex-${tag}.test`;
    dns.set(apex, IP);
    const half = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: apex });
    expect(half.body.error).toMatchObject({ code: 'domain_not_pointed', param: 'domain' });
    expect(half.body.error.message).toContain(`www.${apex}: no A record`);
    dns.set(`www.${apex}`, IP);
    const res = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: apex });
    expect(res.status, res.text).toBe(201);
    // The second custom domain: not primary.
    expect(res.body).toMatchObject({ domain: apex, primary: false, certificate_status: 'active' });
    expect(res.body.dns_records).toEqual([
      { type: 'A', host: apex, value: IP },
      { type: 'A', host: `www.${apex}`, value: IP },
    ]);
    let state = await simState(site.serviceId);
    expect(state.hosts).toEqual(expect.arrayContaining([apex, `www.${apex}`]));
    expect(state.certificates?.[apex]?.names).toEqual([apex, `www.${apex}`]);
    expect(state.content.options.home).toBe(`http://${name('shop')}`);
    // Its www. form is served already.
    expect((await api.post(`/v1/wordpress/${site.id}/domains`, { domain: `www.${apex}`, force: true })).body.error.code).toBe('already_exists');

    const primary = await api.post(`/v1/wordpress/${site.id}/domains/${res.body.id}/primary`);
    expect(primary.status, primary.text).toBe(200);
    expect(primary.body).toMatchObject({ id: res.body.id, domain: apex, primary: true });
    state = await simState(site.serviceId);
    expect(state.content.options.home).toBe(`http://www.${apex}`);
    expect(state.content.options.siteurl).toBe(`http://www.${apex}`);
    expect((await domainsOf(site)).filter((d) => d.primary).map((d) => d.domain)).toEqual([apex]);
    expect((await api.get(`/v1/wordpress/${site.id}/email`)).body.from).toBe(`wordpress@${apex}`);

    // The platform hostname can be made primary again, and back.
    const platformId = await domainId(site, site.name);
    expect((await api.post(`/v1/wordpress/${site.id}/domains/${platformId}/primary`)).body).toMatchObject({ platform: true, primary: true });
    expect((await simState(site.serviceId)).content.options.home).toBe(`http://${site.name}`);
    expect((await api.post(`/v1/wordpress/${site.id}/domains/${res.body.id}/primary`)).status).toBe(200);
  });

  it('an apex primary: the site’s url and the autologin URL use its www. form, primary_domain the apex', async () => {
    const apex = `apex-${tag}.test`;
    const got = await api.get(`/v1/wordpress/${site.id}`);
    expect(got.status, got.text).toBe(200);
    expect(got.body).toMatchObject({ primary_domain: apex, url: `http://www.${apex}` });
    const listed = (await api.get('/v1/wordpress')).body.data.find((s: { id: string }) => s.id === site.id);
    expect(listed).toMatchObject({ primary_domain: apex, url: `http://www.${apex}` });
    const login = await api.post(`/v1/wordpress/${site.id}/autologin`);
    expect(login.status, login.text).toBe(200);
    const url = new URL(login.body.url);
    expect(url.host).toBe(`www.${apex}`);
    expect(url.host).toBe(new URL((await simState(site.serviceId)).content.options.home as string).host);
  });

  it('autologin answers a credential: never replayed from an Idempotency-Key, never cached', async () => {
    const headers = { 'idempotency-key': `autologin-${tag}` };
    const first = await api.post(`/v1/wordpress/${site.id}/autologin`, undefined, headers);
    const again = await api.post(`/v1/wordpress/${site.id}/autologin`, undefined, headers);
    expect(first.status, first.text).toBe(200);
    expect(again.status, again.text).toBe(200);
    expect(first.headers.get('cache-control')).toBe('no-store');
    expect(again.headers.get('cache-control')).toBe('no-store');
    expect(again.body.url).not.toBe(first.body.url);
    expect(await stack.db('idempotency_keys').where({ key: headers['idempotency-key'] })).toEqual([]);
  });

  it('verifies where a domain points, through the resolver', async () => {
    const apex = `apex-${tag}.test`;
    const id = await domainId(site, apex);
    expect((await api.get(`/v1/wordpress/${site.id}/domains/${id}/verify`)).body).toEqual({ domain: apex, points_here: true, reason: null });
    dns.set(`www.${apex}`, '192.0.2.7');
    expect((await api.get(`/v1/wordpress/${site.id}/domains/${id}/verify`)).body).toEqual({
      domain: apex,
      points_here: false,
      reason: `www.${apex}: A records 192.0.2.7 do not include ${IP}`,
    });
    dns.set(`www.${apex}`, null);
    expect((await api.get(`/v1/wordpress/${site.id}/domains/${id}/verify`)).body.reason).toBe(`www.${apex}: no A record`);
    dns.set(`www.${apex}`, IP);
    expect((await api.get(`/v1/wordpress/${site.id}/domains/dom_999999/verify`)).status).toBe(404);
  });

  it('adds with force: the certificate fails while it does not point here; 5 failures an hour stop the attempts', async () => {
    const forced = name('forced');
    const res = await api.post(`/v1/wordpress/${site.id}/domains`, { domain: forced, force: true });
    expect(res.status, res.text).toBe(201);
    expect(res.body).toMatchObject({ domain: forced, primary: false, certificate_status: 'failed', dns_records: [{ type: 'A', host: forced, value: IP }] });
    const row = await stack.db('wordpress_domains').where({ domain: forced }).first();
    expect(row.certificate_failures).toHaveLength(1);
    expect((await simState(site.serviceId)).hosts).toContain(forced);

    // Retry while it still does not point here: one more failure.
    let retry = await api.post(`/v1/wordpress/${site.id}/domains/ssl/retry`);
    expect(retry.status, retry.text).toBe(200);
    expect(retry.body.object).toBe('list');
    expect(retry.body.data.find((d: { domain: string }) => d.domain === forced).certificate_status).toBe('failed');
    expect((await stack.db('wordpress_domains').where({ domain: forced }).first()).certificate_failures).toHaveLength(2);

    // The authority's limit: with 5 failures in the last hour no attempt is made, even once it points here.
    const recent = Array.from({ length: CERT_FAILURES_PER_HOUR }, (_, i) => new Date(Date.now() - (i + 1) * 60_000).toISOString());
    await stack
      .db('wordpress_domains')
      .where({ domain: forced })
      .update({ certificate_failures: JSON.stringify(recent) });
    dns.set(forced, IP);
    retry = await api.post(`/v1/wordpress/${site.id}/domains/ssl/retry`);
    expect(retry.body.data.find((d: { domain: string }) => d.domain === forced).certificate_status).toBe('failed');
    expect((await stack.db('wordpress_domains').where({ domain: forced }).first()).certificate_failures).toEqual(recent);
    expect((await simState(site.serviceId)).certificates?.[forced]).toBeUndefined();

    // Once they are more than an hour old, the retry is made, succeeds, and forgets them.
    const old = recent.map((t) => new Date(Date.parse(t) - 3_600_000).toISOString());
    await stack
      .db('wordpress_domains')
      .where({ domain: forced })
      .update({ certificate_failures: JSON.stringify(old) });
    retry = await api.post(`/v1/wordpress/${site.id}/domains/ssl/retry`);
    expect(retry.body.data.map((d: { domain: string; certificate_status: string }) => [d.domain, d.certificate_status])).toEqual([
      [site.name, 'none'],
      [name('shop'), 'active'],
      [`apex-${tag}.test`, 'active'],
      [forced, 'active'],
    ]);
    expect((await stack.db('wordpress_domains').where({ domain: forced }).first()).certificate_failures).toEqual([]);
    expect((await simState(site.serviceId)).certificates?.[forced]?.names).toEqual([forced]);
  });

  it('refuses a name another site serves (hostname_taken), its apex’s www. form included', async () => {
    const second = await createSite(stack, { name: name('second') });
    for (const taken of [name('shop'), `apex-${tag}.test`, `www.apex-${tag}.test`, site.name]) {
      const res = await api.post(`/v1/wordpress/${second.id}/domains`, { domain: taken, force: true });
      expect(res.status, taken).toBe(400);
      expect(res.body.error, taken).toMatchObject({ code: 'hostname_taken', param: 'domain' });
    }
    // A domain id of another site is not this site's.
    const shopId = await domainId(site, name('shop'));
    expect((await api.post(`/v1/wordpress/${second.id}/domains/${shopId}/primary`)).status).toBe(404);
    expect((await api.del(`/v1/wordpress/${second.id}/domains/${shopId}`)).status).toBe(404);
  });

  it('removes domains: never the platform hostname; removing the primary hands it back', async () => {
    const platformId = await domainId(site, site.name);
    const refused = await api.del(`/v1/wordpress/${site.id}/domains/${platformId}`);
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({ code: 'validation_failed', param: 'domain_id' });

    const apex = `apex-${tag}.test`;
    const apexId = await domainId(site, apex);
    expect((await api.del(`/v1/wordpress/${site.id}/domains/${apexId}`)).status).toBe(204);
    const list = await domainsOf(site);
    expect(list.map((d) => d.domain)).toEqual([site.name, name('shop'), name('forced')]);
    expect(list.find((d) => d.primary)!.domain).toBe(site.name);
    const state = await simState(site.serviceId);
    expect(state.content.options.home).toBe(`http://${site.name}`);
    expect(state.hosts).not.toContain(apex);
    expect(state.hosts).not.toContain(`www.${apex}`);
    expect(state.certificates?.[apex]).toBeUndefined();
    expect((await api.del(`/v1/wordpress/${site.id}/domains/${apexId}`)).status).toBe(404);

    // A non-primary one: the primary stays.
    expect((await api.del(`/v1/wordpress/${site.id}/domains/${await domainId(site, name('forced'))}`)).status).toBe(204);
    expect((await domainsOf(site)).map((d) => [d.domain, d.primary])).toEqual([
      [site.name, true],
      [name('shop'), false],
    ]);
    // The name is free again for another site.
    const third = await createSite(stack, { name: name('third') });
    const moved = await api.post(`/v1/wordpress/${third.id}/domains`, { domain: apex });
    expect(moved.status, moved.text).toBe(201);
    expect(moved.body).toMatchObject({ primary: true, certificate_status: 'active' });
  });

  it('answers 404 for another account’s site', async () => {
    const { accountId } = await createAccount(stack.db);
    const foreign = await createSite(stack, { name: name('foreign'), accountId });
    const foreignDomain = (await stack.db('wordpress_domains').where({ service_id: foreign.serviceId }).first()).id;
    for (const res of [
      await api.get(`/v1/wordpress/${foreign.id}/domains`),
      await api.post(`/v1/wordpress/${foreign.id}/domains`, { domain: name('nope'), force: true }),
      await api.post(`/v1/wordpress/${foreign.id}/domains/ssl/retry`),
      await api.del(`/v1/wordpress/${foreign.id}/domains/dom_${foreignDomain}`),
      await api.post(`/v1/wordpress/${foreign.id}/domains/dom_${foreignDomain}/primary`),
      await api.get(`/v1/wordpress/${foreign.id}/domains/dom_${foreignDomain}/verify`),
      await api.get(`/v1/wordpress/${foreign.id}/cdn`),
      await api.post(`/v1/wordpress/${foreign.id}/cdn/enable`),
      await api.post(`/v1/wordpress/${foreign.id}/cdn/purge`),
      await api.get(`/v1/wordpress/${foreign.id}/edgeproxy`),
      await api.post(`/v1/wordpress/${foreign.id}/edgeproxy/enable`),
    ]) {
      expect(res.status, res.text).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    expect((await stack.db('wordpress_domains').where({ service_id: foreign.serviceId })).map((d) => d.domain)).toEqual([foreign.name]);
    expect((await stack.db('wordpress_sites').where({ service_id: foreign.serviceId }).first()).cdn_enabled).toBe(false);
  });
});

describe('host names are unique platform-wide', () => {
  it('an order cannot take the www. form another site’s apex custom domain serves', async () => {
    await seedOrders(stack.db);
    const victim = await createSite(stack, { name: name('victim') });
    const apex = `victim-${tag}.test`;
    expect((await api.post(`/v1/wordpress/${victim.id}/domains`, { domain: apex, force: true })).status).toBe(201);
    expect(await isSiteNameTaken(stack.db, `www.${apex}`)).toBe(true);
    expect(await isSiteNameTaken(stack.db, `WWW.${apex.toUpperCase()}`)).toBe(true);
    const customer = await newCustomer(stack);
    for (const taken of [`www.${apex}`, apex]) {
      const res = await placeOrder(stack, customer, { product: 'wordpress-starter', site_name: taken });
      expect(res.status, taken).toBe(400);
      expect(res.body.error, taken).toMatchObject({ code: 'hostname_taken', param: 'site_name' });
    }
    // The www. form of a deeper name or of a platform apex is not served by it: not taken by it.
    expect(await isSiteNameTaken(stack.db, `www.www.${apex}`)).toBe(false);
    const platformApex = `plat-${tag}.test`;
    await createSite(stack, { name: platformApex });
    expect(await isSiteNameTaken(stack.db, `www.${platformApex}`)).toBe(false);
  });

  it('the provisioner refuses a name another site serves, rather than share it', async () => {
    const apex = `victim-${tag}.test`;
    const before = await stack.db('wordpress_domains').count({ n: '*' }).first();
    await expect(createSite(stack, { name: `www.${apex}` })).rejects.toThrow(/already served by service \d+ \(domain victim-/);
    await expect(createSite(stack, { name: name('victim') })).rejects.toThrow(/already served by service/);
    expect(await stack.db('wordpress_domains').count({ n: '*' }).first()).toEqual(before);
    // A retry of one site's build finds its own row.
    const again = await createSite(stack, { name: name('rebuilt') });
    const provisioner = new WordpressProvisioner(stack.db, stack.api.deps.providers, stack.api.deps.keyring);
    await provisioner.provision((await provisionTargetOf(stack.db, again.serviceId))!);
    expect((await stack.db('wordpress_domains').where({ service_id: again.serviceId })).map((d) => d.domain)).toEqual([again.name]);
  });

  it('an apex whose www. form is another site’s name, and the other way round, is hostname_taken', async () => {
    const apex = `wwwsite-${tag}.test`;
    const wwwSite = await createSite(stack, { name: `www.${apex}` });
    const other = await createSite(stack, { name: name('other') });
    const res = await api.post(`/v1/wordpress/${other.id}/domains`, { domain: apex, force: true });
    expect(res.status, res.text).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'hostname_taken', param: 'domain' });
    // The site that has the www. name may add the apex itself.
    expect((await api.post(`/v1/wordpress/${wwwSite.id}/domains`, { domain: apex, force: true })).status).toBe(201);
    expect((await api.post(`/v1/wordpress/${other.id}/domains`, { domain: `www.${apex}`, force: true })).body.error.code).toBe('hostname_taken');
  });

  it('two sites racing for an apex and its www. form: one wins, the other is hostname_taken', async () => {
    const [a, b] = [await createSite(stack, { name: name('race-a') }), await createSite(stack, { name: name('race-b') })];
    for (let round = 0; round < 5; round++) {
      const apex = `race${round}-${tag}.test`;
      const [first, second] = await Promise.all([
        api.post(`/v1/wordpress/${a.id}/domains`, { domain: apex, force: true }),
        api.post(`/v1/wordpress/${b.id}/domains`, { domain: `www.${apex}`, force: true }),
      ]);
      expect([first.status, second.status].sort(), `${first.text} ${second.text}`).toEqual([201, 400]);
      expect([first, second].find((r) => r.status === 400)!.body.error).toMatchObject({ code: 'hostname_taken', param: 'domain' });
      expect(await stack.db('wordpress_domains').whereIn('domain', [apex, `www.${apex}`])).toHaveLength(1);
    }
  });
});

describe('CDN', () => {
  it('enables, purges and disables the stand-in edge, keeping the site record in sync', async () => {
    const off = await api.get(`/v1/wordpress/${site.id}/cdn`);
    expect(off.status, off.text).toBe(200);
    expect(off.body).toEqual({ object: 'wordpress_cdn', enabled: false, url: null });

    const url = `http://${IP}:8088/_cdn/svc_${site.serviceId}`;
    const on = await api.post(`/v1/wordpress/${site.id}/cdn/enable`);
    expect(on.status, on.text).toBe(200);
    expect(on.body).toEqual({ object: 'wordpress_cdn', enabled: true, url });
    expect((await simState(site.serviceId)).cdnUrl).toBe(url);
    expect((await stack.db('wordpress_sites').where({ service_id: site.serviceId }).first()).cdn_enabled).toBe(true);
    expect((await api.get(`/v1/wordpress/${site.id}/cdn`)).body).toEqual({ object: 'wordpress_cdn', enabled: true, url });
    // Again: the same.
    expect((await api.post(`/v1/wordpress/${site.id}/cdn/enable`)).body).toEqual({ object: 'wordpress_cdn', enabled: true, url });

    const purged = await api.post(`/v1/wordpress/${site.id}/cdn/purge`);
    expect(purged.status, purged.text).toBe(200);
    expect(purged.body).toEqual({ object: 'wordpress_cdn', enabled: true, url });
    expect((await simState(site.serviceId)).cdnPurges).toBe(1);

    const disabled = await api.post(`/v1/wordpress/${site.id}/cdn/disable`);
    expect(disabled.body).toEqual({ object: 'wordpress_cdn', enabled: false, url: null });
    expect((await simState(site.serviceId)).cdnUrl).toBeNull();
    expect((await stack.db('wordpress_sites').where({ service_id: site.serviceId }).first()).cdn_enabled).toBe(false);
  });
});

describe('edge proxy', () => {
  it('is unsupported on every local product', async () => {
    for (const res of [
      await api.get(`/v1/wordpress/${site.id}/edgeproxy`),
      await api.get(`/v1/wordpress/${site.id}/edgeproxy/records`),
      await api.post(`/v1/wordpress/${site.id}/edgeproxy/enable`),
      await api.post(`/v1/wordpress/${site.id}/edgeproxy/disable`),
    ]) {
      expect(res.status, res.text).toBe(400);
      expect(res.body.error.code).toBe('unsupported_for_product');
    }
    expect((await api.get(`/v1/wordpress/svc_999999/edgeproxy`)).status).toBe(404);
  });
});
