import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { dkimVerify } from 'mailauth/lib/dkim/verify';
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MTA_HOOKS_MODULE } from '../dataplane/mail/mta-hooks';
import { MailDataPlane } from '../dataplane/mail/server';
import { MailGatewayProvisioner } from '../domain/mailgateway/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { HarakaServer, stopHarakaServer } from '../providers/haraka/haraka.server';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';

/**
 * The mail gateway end to end on the real MTA: `/emails` (dataplane/mail/server.ts, in the test's
 * process) hands messages to Haraka (providers/haraka/, started with the gateway's real hooks on
 * this test's database), which signs them with the domain's DKIM key and relays them to an
 * smtp-server sink standing in for the recipients' servers. DKIM is checked with mailauth against
 * the record the API tells the customer to publish. The sink answers `bounce*` with 550.
 */
/** Polls `check` until it gives a value (not null), failing the test after `timeoutMs`. */
async function waitFor<T>(check: () => T | null | Promise<T | null>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== null && value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

let stack: Stack;
let mta: HarakaServer;
let plane: MailDataPlane;
let planeUrl: string;
let sink: SMTPServer;
const root = mkdtempSync(path.join(tmpdir(), 'mail-real-'));
const received: Array<{ mailFrom: string; rcptTo: string[]; raw: Buffer }> = [];

interface Gateway {
  accountId: number;
  token: string;
  key: string;
  domain: string;
  dkimTxt: string;
  dkimName: string;
}
let main: Gateway;
/** Small enough for a test to cross: 4 sends, 40 %. */
const THRESHOLDS = { MAIL_SUSPEND_MIN_SENDS: '4', MAIL_BOUNCE_RATE_LIMIT: '0.4' };

const api = (g: Gateway) => ({
  post: (p: string, body?: unknown) => stack.http.post(p, { token: g.token, body }),
  get: (p: string) => stack.http.get(p, { token: g.token }),
  del: (p: string) => stack.http.request('DELETE', p, { token: g.token }),
});

async function send(g: Gateway, body: Record<string, unknown>, headers: Record<string, string> = {}, key = g.key) {
  const res = await fetch(`${planeUrl}/emails`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

/** An account with a gateway, a verified domain (its records as the API gives them) and a sending key. */
async function gatewayWith(domain: string): Promise<Gateway> {
  const { accountId } = await createAccount(stack.db);
  const owner = await createUser(stack.db, accountId, { isOwner: true });
  const token = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['mailgateway:read', 'mailgateway:write', 'mailgateway:send'] })).token;
  const svc = await createService(stack.db, accountId, { family: 'mailgateway', product: 'mailgateway-10k' });
  await new MailGatewayProvisioner(stack.db, planeUrl).provision((await provisionTargetOf(stack.db, svc.serviceId))!);
  const g = { accountId, token, key: '', domain, dkimTxt: '', dkimName: '' };
  const added = await api(g).post('/v1/mail-gateway/domains', { domain });
  const dkim = added.body.records.find((r: { purpose: string }) => r.purpose === 'dkim');
  // Verification against DNS is test/mailgateway.http.test.ts's; here the domain is taken as verified.
  await stack
    .db('mail_domains')
    .where({ domain, service_id: svc.serviceId })
    .update({ status: 'verified', dkim_status: 'verified', mail_from_status: 'verified', verified_at: new Date() });
  g.key = (await api(g).post('/v1/mail-gateway/keys', { name: 'test' })).body.secret;
  g.dkimTxt = dkim.value;
  g.dkimName = dkim.host;
  return g;
}

/** The message the sink got with this Message-ID. */
const atSink = (messageId: string) => waitFor(() => received.find((m) => m.raw.toString('latin1').includes(`Message-ID: ${messageId}`)) ?? null, 15_000);

async function messageOf(g: Gateway, id: string, until: (m: any) => boolean) {
  return waitFor(async () => {
    const list = (await api(g).get('/v1/mail-gateway/messages?limit=100')).body.data as any[];
    const m = list.find((x) => x.id === id);
    return m && until(m) ? m : null;
  }, 15_000);
}

async function verifyDkim(raw: Buffer, g: Gateway) {
  const resolver = async (name: string, type: string) => {
    if (type === 'TXT' && name === g.dkimName) return [[g.dkimTxt]];
    throw Object.assign(new Error(`no ${type} for ${name}`), { code: 'ENOTFOUND' });
  };
  const result = await dkimVerify(raw, { resolver });
  const header = /^DKIM-Signature:([^\r\n]*(?:\r?\n[ \t][^\r\n]*)*)/im.exec(raw.toString('latin1'))?.[1].replace(/\s+/g, '') ?? '';
  return { status: result.results[0]?.status?.result, c: /(?:^|;)c=([^;]*)/.exec(header)?.[1], d: /(?:^|;)d=([^;]*)/.exec(header)?.[1] };
}

beforeAll(async () => {
  // The API reads the same settings as the MTA: its thresholds, and its data directory (for the SMTP port).
  stack = await startStack({ temporal: 'none', env: { MAIL_DATA_DIR: path.join(root, 'mta'), ...THRESHOLDS } });
  sink = new SMTPServer({
    disabledCommands: ['AUTH', 'STARTTLS'],
    authOptional: true,
    disableReverseLookup: true,
    logger: false,
    onRcptTo(address, _session, callback) {
      if (address.address.startsWith('bounce')) return callback(Object.assign(new Error('5.1.1 no such user here'), { responseCode: 550 }));
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        received.push({
          mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks),
        });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => sink.server.listen(0, '127.0.0.1', () => resolve()));
  const sinkPort = (sink.server.address() as AddressInfo).port;
  const env: Record<string, string> = { DATABASE_URL: stack.config.DATABASE_URL, ...THRESHOLDS };
  if (stack.config.CLOUD_MASTER_KEY) env.CLOUD_MASTER_KEY = stack.config.CLOUD_MASTER_KEY;
  mta = await HarakaServer.start({
    dataDir: path.join(root, 'mta'),
    hooksModule: MTA_HOOKS_MODULE,
    env,
    smarthost: `127.0.0.1:${sinkPort}`,
    tempFailIntervals: '5s*1',
  });
  plane = new MailDataPlane({ db: stack.db, keyring: stack.api.deps.keyring, submission: { host: mta.host, port: mta.port }, keyCacheMs: 200 });
  planeUrl = await plane.listen(0);
  main = await gatewayWith('news.example.test');
}, 90_000);

afterAll(async () => {
  await plane?.close();
  await stopHarakaServer(path.join(root, 'mta'));
  await new Promise<void>((resolve) => (sink ? sink.close(() => resolve()) : resolve()));
  await stack?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('/emails on the real MTA', () => {
  it('refuses a From hiding a second address in its display name; headers are written from the parsed addresses', async () => {
    const hidden = await send(main, { from: `boss@victim.example, Me <me@${main.domain}>`, to: 'x@inbox.test', subject: 's', text: 't' });
    expect(hidden.status).toBe(400);
    expect(hidden.body.error).toMatchObject({ code: 'validation_failed', param: 'from' });
    const sneaky = await send(main, { from: `hello@${main.domain}`, to: ['x@inbox.test', 'a@b.example, c@d.example'], subject: 's', text: 't' });
    expect(sneaky.body.error).toMatchObject({ code: 'validation_failed', param: 'to.1' });
    const quoted = await send(main, { from: `"News, Inc." <hello@${main.domain}>`, to: 'quoted@inbox.test', subject: 'Quoted', text: 't' });
    expect(quoted.status, JSON.stringify(quoted.body)).toBe(202);
    const mail = await atSink(`<${quoted.body.id}@${main.domain}>`);
    expect(mail.raw.toString()).toMatch(new RegExp(`^From: "News, Inc\\." <hello@${main.domain.replace(/\./g, '\\.')}>`, 'm'));
  });

  it('the month quota answers 429 quota_exceeded (counted as rejected); a deleted domain stops sending', async () => {
    const g = await gatewayWith('quota.example.test');
    const serviceId = (await stack.db('mail_gateways').where({ account_id: g.accountId }).first()).service_id;
    await stack.db('mail_usage_days').insert({ service_id: serviceId, day: new Date().toISOString().slice(0, 10), accepted: 10_000, rejected: 0 });
    const over = await send(g, { from: `a@${g.domain}`, to: 'x@inbox.test', subject: 's', text: 't' });
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    expect((await api(g).get('/v1/mail-gateway/usage')).body).toMatchObject({ accepted: 10_000, rejected: 1, limit: 10_000 });
    // Over SMTP too: 452, counted as rejected, nothing recorded.
    const smtp = (await api(g).post('/v1/mail-gateway/smtp')).body;
    await expect(
      nodemailer
        .createTransport({ host: mta.host, port: mta.port, secure: false, ignoreTLS: true, auth: { user: smtp.username, pass: smtp.password } })
        .sendMail({ from: `a@${g.domain}`, to: 'x@inbox.test', subject: 'over', text: 't' }),
    ).rejects.toMatchObject({ responseCode: 452 });
    expect((await api(g).get('/v1/mail-gateway/usage')).body).toMatchObject({ accepted: 10_000, rejected: 2 });
    expect(await stack.db('mail_messages').where({ service_id: serviceId })).toHaveLength(0);
    expect((await api(g).del(`/v1/mail-gateway/domains/${g.domain}`)).status).toBe(204);
    const gone = await send(g, { from: `a@${g.domain}`, to: 'x@inbox.test', subject: 's', text: 't' });
    expect(gone.body.error.code).toBe('domain_not_verified');
  });

  it('sends a message DKIM-signed with the published key (relaxed/relaxed), from the bounce host, and records its delivery', async () => {
    const before = (await api(main).get('/v1/mail-gateway/usage')).body;
    const sent = await send(main, {
      from: `News <hello@${main.domain}>`,
      to: 'reader@inbox.test',
      cc: ['copy@inbox.test'],
      bcc: 'hidden@inbox.test',
      subject: 'Hello',
      text: 'Plain text body.\r\n',
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(202);
    expect(sent.headers.get('x-request-id')).toMatch(/^req_/);
    expect(sent.body).toMatchObject({ object: 'mail_message', domain: main.domain, from: `hello@${main.domain}`, subject: 'Hello', status: 'queued' });
    expect(sent.body.recipients.map((r: { email: string }) => r.email)).toEqual(['copy@inbox.test', 'hidden@inbox.test', 'reader@inbox.test']);
    const id: string = sent.body.id;
    const mail = await atSink(`<${id}@${main.domain}>`);
    expect(mail.mailFrom).toBe(`bounce+${id}@bounce.${main.domain}`);
    expect(mail.rcptTo.sort()).toEqual(['copy@inbox.test', 'hidden@inbox.test', 'reader@inbox.test']);
    expect(mail.raw.toString()).not.toMatch(/^Bcc:/im);
    const dkim = await verifyDkim(mail.raw, main);
    expect(dkim).toEqual({ status: 'pass', c: 'relaxed/relaxed', d: main.domain });
    // Each recipient's outcome is recorded as the MTA reports it: wait for the last of them.
    const delivered = await messageOf(main, id, (m) => m.recipients.every((r: { status: string }) => r.status !== 'queued'));
    expect(delivered.status).toBe('delivered');
    for (const r of delivered.recipients) expect(r).toMatchObject({ status: 'delivered', response: expect.stringMatching(/^250/) });
    expect((await api(main).get('/v1/mail-gateway/usage')).body).toMatchObject({ accepted: before.accepted + 1, rejected: before.rejected });
  });

  it('refuses an unverified domain, a bad body, a revoked key (within a second) and an API key; the refusals to the active key count as rejected', async () => {
    const g = await gatewayWith('refusals.example.test');
    const unverified = await send(g, { from: 'a@elsewhere.example.test', to: 'x@inbox.test', subject: 's', text: 't' });
    expect(unverified.status).toBe(403);
    expect(unverified.body.error).toMatchObject({ code: 'domain_not_verified', param: 'from' });
    const noBody = await send(g, { from: `a@${g.domain}`, to: 'x@inbox.test', subject: 's' });
    expect(noBody.status).toBe(400);
    expect(noBody.body.error).toMatchObject({ code: 'validation_failed', param: 'text' });
    const wrongType = await send(g, { from: `a@${g.domain}`, to: 'x@inbox.test', subject: 's', text: 't' }, {}, g.token);
    expect(wrongType.status).toBe(401);
    expect(wrongType.body.error.code).toBe('wrong_credential_type');
    const keyId = (await api(g).get('/v1/mail-gateway/keys')).body.data[0].id;
    expect((await api(g).del(`/v1/mail-gateway/keys/${keyId}`)).status).toBe(200);
    // Within a second of the revocation the key stops: sends until then are accepted (and counted so).
    let accepted = 0;
    const revoked = await waitFor(async () => {
      const r = await send(g, { from: `a@${g.domain}`, to: 'x@inbox.test', subject: 's', text: 't' });
      if (r.status === 202) accepted++;
      return r.status === 401 ? r : null;
    }, 1_000);
    expect(revoked.body.error.code).toBe('api_key_revoked');
    expect((await api(g).get('/v1/mail-gateway/usage')).body).toMatchObject({ accepted, rejected: 2 });
  });

  it('an Idempotency-Key replays the same message and sends nothing more; another body is 422', async () => {
    const body = { from: `hello@${main.domain}`, to: 'once@inbox.test', subject: 'Once', text: 'only once' };
    const first = await send(main, body, { 'idempotency-key': 'k-once' });
    const again = await send(main, body, { 'idempotency-key': 'k-once' });
    expect(first.status).toBe(202);
    expect(again.status).toBe(202);
    expect(again.body).toEqual(first.body); // the stored answer
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    await atSink(`<${first.body.id}@${main.domain}>`);
    await new Promise((r) => setTimeout(r, 500));
    expect(received.filter((m) => m.rcptTo.includes('once@inbox.test'))).toHaveLength(1);
    const other = await send(main, { ...body, subject: 'Changed' }, { 'idempotency-key': 'k-once' });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe('idempotency_key_reused');
  });

  it('track_opens adds a pixel; fetching it records the open', async () => {
    // A forged pixel (another signature) records nothing, on a message not opened yet.
    const quiet = await send(main, { from: `hello@${main.domain}`, to: 'quiet@inbox.test', subject: 'Quiet', html: '<p>Hi</p>', track_opens: true });
    expect((await fetch(`${planeUrl}/o/${quiet.body.id}.${'0'.repeat(32)}.gif`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 300));
    expect(await stack.db('mail_events').where({ message_id: quiet.body.id, kind: 'opened' })).toHaveLength(0);
    const sent = await send(main, { from: `hello@${main.domain}`, to: 'opens@inbox.test', subject: 'Pixel', html: '<p>Hi</p>', track_opens: true });
    expect(sent.status).toBe(202);
    const mail = await atSink(`<${sent.body.id}@${main.domain}>`);
    const pixel = new RegExp(`${planeUrl.replace(/[.:/]/g, '\\$&')}/o/${sent.body.id}\\.[0-9a-f]{32}\\.gif`).exec(mail.raw.toString().replace(/=\r?\n/g, ''));
    expect(pixel).not.toBeNull();
    const res = await fetch(pixel![0]);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('image/gif');
    await messageOf(main, sent.body.id, (m) => m.status === 'opened');
    // Fetched again: still one open.
    await fetch(pixel![0]);
    expect(await stack.db('mail_events').where({ message_id: sent.body.id, kind: 'opened' })).toHaveLength(1);
  });

  it('SMTP submission with the issued credential is signed and recorded; after rotate the old one is refused (535)', async () => {
    const smtp = await api(main).post('/v1/mail-gateway/smtp');
    expect(smtp.status, smtp.text).toBe(200);
    expect(smtp.body).toMatchObject({ object: 'mail_smtp_credential', host: mta.host, port: mta.port });
    expect((await api(main).post('/v1/mail-gateway/smtp')).status).toBe(409);
    expect((await api(main).get('/v1/mail-gateway/smtp')).body).toMatchObject({ username: smtp.body.username, status: 'active' });
    const client = (auth: { user: string; pass: string }) =>
      nodemailer.createTransport({ host: mta.host, port: mta.port, secure: false, ignoreTLS: true, auth });
    const info = await client({ user: smtp.body.username, pass: smtp.body.password }).sendMail({
      from: `hello@${main.domain}`,
      to: 'smtp@inbox.test',
      subject: 'Over SMTP',
      text: 'submitted',
    });
    expect(info.response).toMatch(/^250/);
    const mail = await waitFor(() => received.find((m) => m.rcptTo.includes('smtp@inbox.test')) ?? null, 15_000);
    expect((await verifyDkim(mail.raw, main)).status).toBe('pass');
    const listed = await waitFor(async () => {
      const data = (await api(main).get('/v1/mail-gateway/messages')).body.data as any[];
      return data.find((m) => m.subject === 'Over SMTP' && m.status === 'delivered') ?? null;
    }, 15_000);
    expect(listed.recipients).toEqual([{ email: 'smtp@inbox.test', status: 'delivered', response: expect.stringMatching(/^250/) }]);
    // Two From headers (one of another domain), or two addresses in one: 550, whatever the first says.
    const raw = (from: string) => `${from}\r\nTo: a@inbox.test\r\nSubject: spoof\r\nMessage-ID: <spoof-${Date.now()}@x>\r\n\r\nbody\r\n`;
    for (const from of [`From: hello@${main.domain}\r\nFrom: boss@victim.example`, `From: hello@${main.domain}, boss@victim.example`]) {
      await expect(
        client({ user: smtp.body.username, pass: smtp.body.password }).sendMail({
          envelope: { from: `hello@${main.domain}`, to: ['a@inbox.test'] },
          raw: raw(from),
        }),
      ).rejects.toMatchObject({ responseCode: 550 });
    }
    // An unverified From domain over SMTP: 550.
    await expect(
      client({ user: smtp.body.username, pass: smtp.body.password }).sendMail({
        from: 'x@unverified.example.test',
        to: 'a@inbox.test',
        subject: 's',
        text: 't',
      }),
    ).rejects.toMatchObject({ responseCode: 550 });
    const rotated = await api(main).post('/v1/mail-gateway/smtp/rotate');
    expect(rotated.body.username).not.toBe(smtp.body.username);
    await expect(
      client({ user: smtp.body.username, pass: smtp.body.password }).sendMail({ from: `hello@${main.domain}`, to: 'a@inbox.test', subject: 's', text: 't' }),
    ).rejects.toMatchObject({
      responseCode: 535,
    });
  });

  it("another account's SMTP credential cannot send from this account's verified domain, nor sign with its key", async () => {
    const g = await gatewayWith('tenant-b.example.test');
    const smtp = (await api(g).post('/v1/mail-gateway/smtp')).body;
    const client = nodemailer.createTransport({
      host: mta.host,
      port: mta.port,
      secure: false,
      ignoreTLS: true,
      auth: { user: smtp.username, pass: smtp.password },
    });
    // The envelope from its own domain, the From header from the other account's: refused at DATA.
    await expect(
      client.sendMail({
        envelope: { from: `a@${g.domain}`, to: ['victim@inbox.test'] },
        from: `ceo@${main.domain}`,
        to: 'victim@inbox.test',
        subject: 'x',
        text: 't',
      }),
    ).rejects.toMatchObject({ responseCode: 550 });
    // Both from the other account's domain: refused at MAIL FROM.
    await expect(client.sendMail({ from: `ceo@${main.domain}`, to: 'victim@inbox.test', subject: 'x', text: 't' })).rejects.toMatchObject({
      responseCode: 550,
    });
    expect(received.some((m) => m.rcptTo.includes('victim@inbox.test'))).toBe(false);
  });

  it('a bounce is recorded with the remote reply and sends no DSN; crossing the bounce rate suspends sending', async () => {
    const g = await gatewayWith('bouncy.example.test');
    const ids: string[] = [];
    for (const to of ['ok1@inbox.test', 'bounce1@inbox.test', 'bounce2@inbox.test', 'ok2@inbox.test']) {
      const r = await send(g, { from: `a@${g.domain}`, to, subject: `to ${to}`, text: 't' });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      ids.push(r.body.id);
    }
    const bounced = await messageOf(g, ids[1], (m) => m.status === 'bounced');
    expect(bounced.recipients[0].response).toMatch(/^550/);
    await messageOf(g, ids[2], (m) => m.status === 'bounced');
    // 2 bounces of 4 sends: 50 % > the 40 % limit (with at least 4 sends).
    const gateway = await waitFor(async () => {
      const r = (await api(g).get('/v1/mail-gateway')).body;
      return r.status === 'suspended' ? r : null;
    }, 15_000);
    expect(gateway.suspended_reason).toMatch(/bounce rate/);
    const refused = await send(g, { from: `a@${g.domain}`, to: 'late@inbox.test', subject: 's', text: 't' });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('sending_suspended');
    expect(received.some((m) => m.mailFrom === '' || m.rcptTo.some((r) => r.includes(g.domain)))).toBe(false);
    const metrics = (await api(g).get('/v1/mail-gateway/metrics?days=1')).body;
    expect(metrics).toMatchObject({ object: 'mail_metrics', days: 1, sent: 4, bounced: 2, bounce_rate: 0.5, bounce_rate_limit: 0.4 });
    expect(metrics.daily).toHaveLength(1);
    expect(metrics.domains).toEqual([{ domain: g.domain, sent: 4, delivered: expect.any(Number), opened: 0, bounced: 2, complained: 0 }]);
  });
});
