import { createPublicKey, verify, sign } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_MAIL_DOMAIN, seedMailGateway } from '../db/seeds/mailgateway.seed';
import { newMessageId, recordAccepted, recordOutcome } from '../domain/mailgateway/messages';
import { sweepMail } from '../domain/mailgateway/retention';
import { DKIM_KEY_PURPOSE } from '../domain/mailgateway/store';
import { MailGatewayProvisioner } from '../domain/mailgateway/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { canonicalValue } from '../providers/dns.values';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startTestPowerDns, TEST_ZONE_DEFAULTS, type TestPowerDns } from './helpers/powerdns';
import { startStack, type Stack } from './helpers/stack';

/**
 * The mail gateway's control plane: the gateway, sending domains (records, the same ones when added
 * again, new keys after a delete) verified against a real PowerDNS through DNS_RESOLVER, sending
 * keys, usage, and another account's isolation.
 */
let stack: Stack;
let pdns: TestPowerDns;
const MX_HOST = 'mx.mail-test.example.net';
const ZONE = 'shop-mail.test';

const api = {
  post: (p: string, body?: unknown, t = stack.owner.key) => stack.http.post(p, { token: t, body }),
  get: (p: string, t = stack.owner.key) => stack.http.get(p, { token: t }),
  del: (p: string, t = stack.owner.key) => stack.http.request('DELETE', p, { token: t }),
};

async function provision(accountId: number): Promise<number> {
  const svc = await createService(stack.db, accountId, { family: 'mailgateway', product: 'mailgateway-10k' });
  await new MailGatewayProvisioner(stack.db, 'http://127.0.0.1:3200').provision((await provisionTargetOf(stack.db, svc.serviceId))!);
  return svc.serviceId;
}

/** A second account with an owner and a key of every mail gateway scope. */
async function otherAccount(): Promise<{ accountId: number; key: { token: string } }> {
  const { accountId } = await createAccount(stack.db);
  const owner = await createUser(stack.db, accountId, { isOwner: true });
  const key = await createApiKey(stack.db, accountId, owner.userId, { scopes: ['mailgateway:read', 'mailgateway:write', 'mailgateway:send'] });
  return { accountId, key };
}

type Rec = { purpose: string; type: string; host: string; value: string; status: string };
const rec = (records: Rec[], purpose: string) => records.find((r) => r.purpose === purpose)!;

/** Publishes a record as the customer would, in the test's PowerDNS. */
async function publish(r: Rec, value = r.value) {
  const name = r.host;
  const canonical = r.type === 'TXT' ? canonicalValue('TXT', value, 'value') : `${value.split(' ')[0]} ${value.split(' ')[1]}.`;
  await pdns.adapter.replaceRRset(ZONE, { name, type: r.type as 'TXT' | 'MX', ttl: 60, values: [canonical] });
}

beforeAll(async () => {
  pdns = await startTestPowerDns();
  await pdns.adapter.createZone(ZONE, TEST_ZONE_DEFAULTS);
  stack = await startStack({ temporal: 'none', env: { DNS_RESOLVER: pdns.server.dnsAddress, MAIL_MX_HOST: MX_HOST } });
  await provision(stack.owner.accountId);
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await pdns?.close();
});

describe('the gateway', () => {
  it('shows status, api_endpoint, this month usage and counts; 404 for an account without one', async () => {
    const res = await api.get('/v1/mail-gateway');
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({
      object: 'mail_gateway',
      status: 'active',
      suspended_reason: null,
      api_endpoint: 'http://127.0.0.1:3200',
      usage: { month: new Date().toISOString().slice(0, 7), accepted: 0, rejected: 0 },
    });
    const usage = await api.get('/v1/mail-gateway/usage');
    expect(usage.body).toEqual({ object: 'mail_usage', month: new Date().toISOString().slice(0, 7), accepted: 0, rejected: 0, limit: 10_000 });

    const other = await otherAccount();
    const key = other.key;
    for (const path of ['/v1/mail-gateway', '/v1/mail-gateway/usage', '/v1/mail-gateway/domains', '/v1/mail-gateway/keys']) {
      const none = await api.get(path, key.token);
      expect(none.status, path).toBe(404);
      expect(none.body.error.code).toBe('not_found');
    }
  });
});

describe('sending domains', () => {
  it('adds a domain with its records; adding it again returns the same records; two labels at least', async () => {
    const added = await api.post('/v1/mail-gateway/domains', { domain: `News.${ZONE}.` });
    expect(added.status, added.text).toBe(201);
    expect(added.body).toMatchObject({ object: 'mail_domain', domain: `news.${ZONE}`, status: 'pending', verified_at: null });
    const records: Rec[] = added.body.records;
    expect(records.map((r) => [r.purpose, r.type, r.status])).toEqual([
      ['dkim', 'TXT', 'pending'],
      ['mail_from_mx', 'MX', 'pending'],
      ['mail_from_spf', 'TXT', 'info'],
      ['spf', 'TXT', 'info'],
      ['dmarc', 'TXT', 'info'],
    ]);
    const dkim = rec(records, 'dkim');
    expect(dkim.host).toMatch(new RegExp(`^mg[0-9a-f]{10}\\._domainkey\\.news\\.${ZONE.replace('.', '\\.')}$`));
    // The published key is a real RSA 2048 public key (SPKI), usable to check a signature.
    const spki = Buffer.from(/p=([A-Za-z0-9+/=]+)$/.exec(dkim.value)![1], 'base64');
    const publicKey = createPublicKey({ key: spki, format: 'der', type: 'spki' });
    expect(publicKey.asymmetricKeyDetails?.modulusLength).toBe(2048);
    expect(rec(records, 'mail_from_mx')).toMatchObject({ host: `bounce.news.${ZONE}`, value: `10 ${MX_HOST}` });
    expect(rec(records, 'dmarc').host).toBe(`_dmarc.news.${ZONE}`);

    const again = await api.post('/v1/mail-gateway/domains', { domain: `news.${ZONE}` });
    expect(again.status).toBe(200);
    expect(again.body.records).toEqual(records);

    for (const domain of ['localhost', 'not a domain', `x.${'a'.repeat(64)}.test`]) {
      const bad = await api.post('/v1/mail-gateway/domains', { domain });
      expect(bad.status, domain).toBe(400);
      expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'domain' });
    }
  });

  it('seals the DKIM private key at rest, and it matches the published public key', async () => {
    const row = await stack
      .db('mail_domains')
      .where({ domain: `news.${ZONE}` })
      .first();
    expect(row.dkim_private_sealed).not.toContain('PRIVATE KEY');
    const pem = stack.api.deps.keyring.decrypt(DKIM_KEY_PURPOSE, row.dkim_private_sealed);
    const signature = sign('sha256', Buffer.from('probe'), pem);
    const publicKey = createPublicKey({ key: Buffer.from(row.dkim_public, 'base64'), format: 'der', type: 'spki' });
    expect(verify('sha256', Buffer.from('probe'), publicKey, signature)).toBe(true);
  });

  it('verify: pending until both records are published as given, then verified; the others stay info', async () => {
    const domain = `news.${ZONE}`;
    const { records } = (await api.post('/v1/mail-gateway/domains', { domain })).body as { records: Rec[] };
    const first = await api.post(`/v1/mail-gateway/domains/${domain}/verify`);
    expect(first.status, first.text).toBe(200);
    expect(first.body.status).toBe('pending');

    // A DKIM record with another key does not count.
    await publish(rec(records, 'dkim'), 'v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong');
    await publish(rec(records, 'mail_from_mx'));
    const half = await api.post(`/v1/mail-gateway/domains/${domain}/verify`);
    expect(half.body.status).toBe('pending');
    expect(rec(half.body.records, 'dkim').status).toBe('pending');
    expect(rec(half.body.records, 'mail_from_mx').status).toBe('verified');

    await publish(rec(records, 'dkim'));
    const done = await api.post(`/v1/mail-gateway/domains/${domain}/verify`);
    expect(done.body.status).toBe('verified');
    expect(done.body.verified_at).toBeNull(); // SPEC: null in this answer
    expect(done.body.records.map((r: Rec) => r.status)).toEqual(['verified', 'verified', 'info', 'info', 'info']);
    const listed = (await api.get('/v1/mail-gateway/domains')).body.data.find((d: { domain: string }) => d.domain === domain);
    expect(Date.parse(listed.verified_at)).toBeGreaterThan(Date.now() - 60_000);
    expect((await api.get('/v1/mail-gateway')).body.domain_count).toBe(1);
  });

  it("verify answers 503 while the mail provider's outage switch is on", async () => {
    const down = await stack.http.post('/_dev/backends/mailgateway/outage', { body: { down: true } });
    expect(down.status, down.text).toBe(200);
    try {
      const res = await api.post(`/v1/mail-gateway/domains/news.${ZONE}/verify`);
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe('backend_unavailable');
    } finally {
      await stack.http.post('/_dev/backends/mailgateway/outage', { body: { down: false } });
    }
  });

  it('lists domains newest first; at most 50 per gateway (429 quota_exceeded)', async () => {
    const other = await otherAccount();
    const serviceId = await provision(other.accountId);
    const rows = Array.from({ length: 49 }, (_, i) => ({
      service_id: serviceId,
      domain: `d${i}.quota.example.test`,
      dkim_selector: 'x',
      dkim_public: 'AAAA',
      dkim_private_sealed: stack.api.deps.keyring.encrypt('mail-dkim-private-key', 'x'),
      mail_from_host: `bounce.d${i}.quota.example.test`,
    }));
    await stack.db('mail_domains').insert(rows);
    const fiftieth = await api.post('/v1/mail-gateway/domains', { domain: 'last.quota.example.test' }, other.key.token);
    expect(fiftieth.status, fiftieth.text).toBe(201);
    const listed = await api.get('/v1/mail-gateway/domains?limit=2', other.key.token);
    expect(listed.body.data.map((d: { domain: string }) => d.domain)).toEqual(['last.quota.example.test', 'd48.quota.example.test']);
    const over = await api.post('/v1/mail-gateway/domains', { domain: 'over.quota.example.test' }, other.key.token);
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    // Adding one that is there already is not a new one.
    expect((await api.post('/v1/mail-gateway/domains', { domain: 'd0.quota.example.test' }, other.key.token)).status).toBe(200);
  });

  it('verify answers 503 when the resolver does not answer, and changes nothing', async () => {
    const deaf = await startStack({ temporal: 'none', env: { DNS_RESOLVER: '127.0.0.1:9', MAIL_MX_HOST: MX_HOST } });
    try {
      const svc = await createService(deaf.db, deaf.owner.accountId, { family: 'mailgateway', product: 'mailgateway-10k' });
      await new MailGatewayProvisioner(deaf.db, 'http://127.0.0.1:3200').provision((await provisionTargetOf(deaf.db, svc.serviceId))!);
      await deaf.http.post('/v1/mail-gateway/domains', { token: deaf.owner.key, body: { domain: 'deaf.example.test' } });
      const res = await deaf.http.post('/v1/mail-gateway/domains/deaf.example.test/verify', { token: deaf.owner.key });
      expect(res.status, res.text).toBe(503);
      expect(res.body.error.code).toBe('backend_unavailable');
      expect((await deaf.db('mail_domains').where({ domain: 'deaf.example.test' }).first()).status).toBe('pending');
    } finally {
      await deaf.close();
    }
  }, 30_000);

  it('delete stops the domain; adding it again makes a new key pair and new records', async () => {
    const domain = `old.${ZONE}`;
    const before = (await api.post('/v1/mail-gateway/domains', { domain })).body;
    const gone = await api.del(`/v1/mail-gateway/domains/${domain}`);
    expect(gone.status, gone.text).toBe(204);
    expect((await api.del(`/v1/mail-gateway/domains/${domain}`)).status).toBe(404);
    expect((await api.post(`/v1/mail-gateway/domains/${domain}/verify`)).status).toBe(404);
    const after = await api.post('/v1/mail-gateway/domains', { domain });
    expect(after.status).toBe(201);
    expect(rec(after.body.records, 'dkim').value).not.toBe(rec(before.records, 'dkim').value);
    expect(rec(after.body.records, 'dkim').host).not.toBe(rec(before.records, 'dkim').host);
    expect((await api.del('/v1/mail-gateway/domains/not%20a%20domain')).status).toBe(404);
  });
});

describe('sending keys', () => {
  it('shows the secret once, lists revoked keys without secrets, revokes idempotently', async () => {
    const made = await api.post('/v1/mail-gateway/keys', { name: 'production' });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ object: 'mail_key', name: 'production', last_used_at: null, revoked_at: null });
    expect(made.body.id).toMatch(/^mgk_\d+$/);
    expect(made.body.secret).toMatch(/^mg_live_[A-Za-z0-9]{32,}$/);
    const stored = await stack.db('mail_keys').where({ name: 'production' }).first();
    expect(JSON.stringify(stored)).not.toContain(made.body.secret);

    const revoked = await api.del(`/v1/mail-gateway/keys/${made.body.id}`);
    expect(revoked.status, revoked.text).toBe(200);
    expect(revoked.body.secret).toBeNull();
    expect(Date.parse(revoked.body.revoked_at)).toBeGreaterThan(Date.now() - 60_000);
    const twice = await api.del(`/v1/mail-gateway/keys/${made.body.id}`);
    expect(twice.body.revoked_at).toBe(revoked.body.revoked_at);

    await api.post('/v1/mail-gateway/keys', { name: 'second' });
    const list = await api.get('/v1/mail-gateway/keys');
    // Newest first.
    expect(list.body.data.map((k: { name: string; secret: null }) => [k.name, k.secret])).toEqual([
      ['second', null],
      ['production', null],
    ]);
    expect((await api.get('/v1/mail-gateway')).body.key_count).toBe(1);
    expect((await api.post('/v1/mail-gateway/keys', { name: '' })).status).toBe(400);
    expect((await api.del('/v1/mail-gateway/keys/mgk_999999')).status).toBe(404);
    expect((await api.del('/v1/mail-gateway/keys/bogus')).status).toBe(404);
  });

  it("another account's key id is a 404", async () => {
    const other = await otherAccount();
    const key = other.key;
    await provision(other.accountId);
    const theirs = await api.post('/v1/mail-gateway/keys', { name: 'theirs' }, key.token);
    expect((await api.del(`/v1/mail-gateway/keys/${theirs.body.id}`)).status).toBe(404);
    expect((await api.get('/v1/mail-gateway/domains', key.token)).body.data).toEqual([]);
  });
});

describe('messages, statuses, metrics and retention', () => {
  const serviceOfOwner = async () => Number((await stack.db('mail_gateways').where({ account_id: stack.owner.accountId }).first()).service_id);
  async function message(recipients: string[], createdAt?: Date): Promise<string> {
    const id = newMessageId();
    const serviceId = await serviceOfOwner();
    await stack.db.transaction((trx) =>
      recordAccepted(trx, { id, serviceId, domain: `news.${ZONE}`, from: `a@news.${ZONE}`, subject: 's', recipients, via: 'api' }),
    );
    if (createdAt) await stack.db('mail_messages').where({ id }).update({ created_at: createdAt });
    return id;
  }

  it("a message's status is its highest-severity event whatever the order; each recipient keeps its own", async () => {
    const id = await message(['one@x.test', 'Two@x.test']);
    const at = new Date();
    await recordOutcome(stack.db, { messageId: id, recipient: 'two@x.test', kind: 'bounced', response: '550 5.1.1 gone', at });
    await recordOutcome(stack.db, { messageId: id, recipient: 'one@x.test', kind: 'delivered', response: '250 ok', at });
    await recordOutcome(stack.db, { messageId: id, recipient: 'one@x.test', kind: 'deferred', response: '451 later', at }); // lower: ignored
    const listed = (await api.get('/v1/mail-gateway/messages')).body.data.find((m: { id: string }) => m.id === id);
    expect(listed.status).toBe('bounced');
    expect(listed.recipients).toEqual([
      { email: 'one@x.test', status: 'delivered', response: '451 later' },
      { email: 'two@x.test', status: 'bounced', response: '550 5.1.1 gone' },
    ]);
    expect(await recordOutcome(stack.db, { messageId: 'msg_gone', recipient: null, kind: 'opened', response: null, at })).toBeNull();
  });

  it('lists newest first with cursor pagination; metrics count messages by event', async () => {
    const ids = [await message(['p1@x.test']), await message(['p2@x.test']), await message(['p3@x.test'])];
    const first = await api.get('/v1/mail-gateway/messages?limit=2');
    expect(first.body.data.map((m: { id: string }) => m.id)).toEqual([ids[2], ids[1]]);
    expect(first.body.has_more).toBe(true);
    const next = await api.get(`/v1/mail-gateway/messages?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`);
    expect(next.body.data[0].id).toBe(ids[0]);
    const metrics = (await api.get('/v1/mail-gateway/metrics?days=7')).body;
    expect(metrics).toMatchObject({ object: 'mail_metrics', days: 7, bounce_rate_limit: 0.05, complaint_rate_limit: 0.001 });
    expect(metrics.sent).toBeGreaterThanOrEqual(4);
    expect(metrics.bounced).toBe(1);
    expect(metrics.delivered).toBe(1);
    expect(metrics.bounce_rate).toBeCloseTo(1 / metrics.sent);
    expect(metrics.daily).toHaveLength(7);
    expect(metrics.daily[6].date).toBe(new Date().toISOString().slice(0, 10));
    expect((await api.get('/v1/mail-gateway/metrics?days=91')).status).toBe(400);
  });

  it('messages past 90 days are deleted with their recipients and events; newer ones stay', async () => {
    const old = await message(['old@x.test'], new Date(Date.now() - 91 * 86_400_000));
    const recent = await message(['new@x.test'], new Date(Date.now() - 89 * 86_400_000));
    await sweepMail(stack.db);
    expect(await stack.db('mail_messages').where({ id: old }).first()).toBeUndefined();
    expect(await stack.db('mail_recipients').where({ message_id: old }).first()).toBeUndefined();
    expect(await stack.db('mail_events').where({ message_id: old }).first()).toBeUndefined();
    expect(await stack.db('mail_messages').where({ id: recent }).first()).toBeDefined();
  });
});

describe('the demo seed', () => {
  it("publishes the demo domain's records in the run's DNS server and verifies them; seeding again changes nothing", async () => {
    const demo = await otherAccount();
    await createService(stack.db, demo.accountId, { family: 'mailgateway', product: 'mailgateway-10k' });
    await pdns.adapter.createZone(DEMO_MAIL_DOMAIN, TEST_ZONE_DEFAULTS);
    await seedMailGateway(stack.db, stack.api.deps.keyring, { dns: pdns.adapter }, stack.config, demo.accountId);
    const domains = (await api.get('/v1/mail-gateway/domains', demo.key.token)).body.data;
    expect(domains.map((d: { domain: string; status: string }) => [d.domain, d.status])).toEqual([[DEMO_MAIL_DOMAIN, 'verified']]);
    await seedMailGateway(stack.db, stack.api.deps.keyring, { dns: pdns.adapter }, stack.config, demo.accountId);
    expect((await api.get('/v1/mail-gateway/domains', demo.key.token)).body.data).toEqual(domains);
  });
});

describe('termination', () => {
  it('revokes every key; changes on a terminated gateway answer 409', async () => {
    const other = await otherAccount();
    const key = other.key;
    const serviceId = await provision(other.accountId);
    await api.post('/v1/mail-gateway/keys', { name: 'k' }, key.token);
    const target = (await provisionTargetOf(stack.db, serviceId))!;
    await new MailGatewayProvisioner(stack.db, 'http://127.0.0.1:3200').deprovision(target);
    await stack.db('services').where({ id: serviceId }).update({ status: 'terminated' });
    expect((await api.get('/v1/mail-gateway/keys', key.token)).body.data.every((k: { revoked_at: string | null }) => k.revoked_at !== null)).toBe(true);
    const refused = await api.post('/v1/mail-gateway/domains', { domain: 'late.example.test' }, key.token);
    expect(refused.status).toBe(409);
    expect((await api.get('/v1/mail-gateway', key.token)).body.status).toBe('suspended');
  });
});
