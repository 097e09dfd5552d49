import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Knex } from 'knex';
import nodemailer, { type Transporter } from 'nodemailer';
import { z } from 'zod';
import type { Keyring } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import { countSend, newMessageId, recordOutcome, recordWithinQuota } from '../../domain/mailgateway/messages';
import { monthlyLimitOf } from '../../domain/mailgateway/plans';
import { platformPassword, PLATFORM_USERNAME } from '../../domain/mailgateway/smtp';
import { secretHash } from '../../domain/mailgateway/store';
import { messageView } from '../../domain/mailgateway/present';
import { DataPlaneError, readBody, sendError } from '../errors';

/**
 * The mail gateway's data plane (SPEC "Mail gateway", DECISIONS "Mail gateway"): `POST /emails`
 * with a sending key (`mg_live_`), and the open-tracking pixel. Its own process (`npm run mail`),
 * never the control-plane API.
 *
 * A send, in this order: the key (`401 invalid_api_key | api_key_revoked | wrong_credential_type`),
 * the body (`400 validation_failed` with `param`), the `Idempotency-Key` (a replay answers the same
 * message and sends nothing), the From domain (`403 domain_not_verified`, param `from`), the
 * gateway's suspension (`403 sending_suspended`), the month's quota (`429 quota_exceeded`). Every
 * refusal after the key counts one rejected send; a `202` counts one accepted. The message is then
 * recorded and handed to the platform's MTA (Haraka) over SMTP as the `platform` user, which signs
 * it with the domain's DKIM key and delivers it. If the MTA does not take it, the record and the
 * count are undone and the answer is `503 backend_unavailable`.
 */
export interface MailDataPlaneOptions {
  db: Knex;
  keyring: Keyring;
  /** The MTA's submission address. */
  submission: { host: string; port: number };
  /** How long a looked-up key is trusted (a revoked key stops within this). */
  keyCacheMs?: number;
  /** Told of what the client is not (an MTA failure, an unexpected error): for the process's log. */
  onError?: (err: Error) => void;
}

/**
 * `a@example.com`, `Name <a@example.com>` or `"Name, Inc." <a@example.com>`; the address's domain
 * lower-cased. An unquoted display name may not hold `,` `;` `:` `<` `>` `@` or `"`: otherwise
 * `boss@victim.example, Me <me@mine.example>` would pass as `me@mine.example` while the header
 * showed two senders. What is sent is rebuilt from the parts, never the text as given.
 */
const MAILBOX =
  /^\s*(?:(?:"([^"\\\r\n]*)"|([^",;:<>@\r\n]*?))\s*<([^<>\s@",;:]+@[^<>\s@",;:]+\.[^<>\s@",;:]+)>|([^<>\s@",;:]+@[^<>\s@",;:]+\.[^<>\s@",;:]+))\s*$/;
interface Mailbox {
  name: string | null;
  address: string;
  domain: string;
}
function parseMailbox(text: string): Mailbox | null {
  const m = MAILBOX.exec(text);
  if (!m) return null;
  const address = m[3] ?? m[4];
  const at = address.lastIndexOf('@');
  const domain = address.slice(at + 1).toLowerCase();
  return { name: (m[1] ?? m[2])?.trim() || null, address: `${address.slice(0, at)}@${domain}`, domain };
}
/** For nodemailer: the parts, so that it writes the header itself. */
const forHeader = (m: Mailbox) => ({ name: m.name ?? '', address: m.address });
const mailbox = z
  .string()
  .max(998)
  .refine((v) => parseMailbox(v) !== null, 'must be an address (a@example.com) or Name <a@example.com>');
const mailboxes = z.union([mailbox, z.array(mailbox).min(1).max(50)]);

const SendBody = z
  .object({
    from: mailbox,
    to: mailboxes,
    cc: mailboxes.optional(),
    bcc: mailboxes.optional(),
    subject: z.string().max(998),
    text: z.string().max(2_000_000).optional(),
    html: z.string().max(2_000_000).optional(),
    track_opens: z.boolean().optional(),
  })
  .strict()
  .refine((b) => b.text !== undefined || b.html !== undefined, { message: 'a message needs text or html', path: ['text'] })
  .refine((b) => !b.track_opens || b.html !== undefined, { message: 'track_opens needs an html part', path: ['track_opens'] });
type Send = z.infer<typeof SendBody>;

const list = (v: string | string[] | undefined): string[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** A 1x1 transparent GIF. */
const PIXEL = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

export class MailDataPlane {
  private server: http.Server | null = null;
  private readonly transport: Transporter;
  private readonly keys = new Map<string, { key: KeyHit | null; at: number }>();
  private publicUrl = '';

  constructor(private readonly options: MailDataPlaneOptions) {
    this.transport = nodemailer.createTransport({
      host: options.submission.host,
      port: options.submission.port,
      secure: false,
      ignoreTLS: true,
      pool: true,
      maxConnections: 4,
      auth: { user: PLATFORM_USERNAME, pass: platformPassword(options.keyring) },
    });
  }

  async listen(port: number, host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve) => this.server!.listen(port, host, resolve));
    const address = this.server.address() as AddressInfo;
    this.publicUrl = `http://${host}:${address.port}`;
    return this.publicUrl;
  }

  async close(): Promise<void> {
    this.transport.close();
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const requestId = newUlidId('req');
    res.setHeader('X-Request-Id', requestId);
    try {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/emails' && req.method === 'POST') return await this.send(req, res);
      const open = /^\/o\/(msg_[0-9A-Za-z]+)\.([0-9a-f]{32})\.gif$/.exec(path);
      if (open && (req.method === 'GET' || req.method === 'HEAD')) return await this.opened(res, open[1], open[2]);
      if (path === '/healthz') return void res.end('ok');
      if (path === '/emails') {
        res.setHeader('Allow', 'POST');
        throw new DataPlaneError(405, 'invalid_request_error', 'method_not_allowed', `${req.method} is not allowed on /emails.`);
      }
      throw new DataPlaneError(404, 'invalid_request_error', 'route_not_found', 'The mail data plane answers POST /emails.');
    } catch (err) {
      if (!(err instanceof DataPlaneError)) this.options.onError?.(err as Error);
      sendError(
        res,
        err instanceof DataPlaneError ? err : new DataPlaneError(500, 'api_error', 'internal_error', 'The message could not be taken; try again.'),
        requestId,
      );
    }
  }

  /** The sending key of the request (trusted for `keyCacheMs`), or 401. */
  private async keyOf(req: http.IncomingMessage): Promise<KeyHit> {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    if (!m) throw new DataPlaneError(401, 'authentication_error', 'invalid_api_key', 'Send a sending key: Authorization: Bearer mg_live_...');
    const secret = m[1];
    if (!secret.startsWith('mg_live_')) {
      throw new DataPlaneError(
        401,
        'authentication_error',
        'wrong_credential_type',
        'This is not a sending key (mg_live_...); API keys and sessions do not send mail.',
      );
    }
    const cached = this.keys.get(secret);
    let hit = cached && Date.now() - cached.at < (this.options.keyCacheMs ?? 500) ? cached.key : undefined;
    if (hit === undefined) {
      const row = await this.options
        .db('mail_keys')
        .where({ secret_hash: secretHash(secret) })
        .first('id', 'service_id', 'revoked_at');
      hit = row ? { id: Number(row.id), serviceId: Number(row.service_id), revoked: row.revoked_at !== null } : null;
      // `last_used_at` moves when the key is looked up (at most every keyCacheMs while it is used), not per send.
      if (hit && !hit.revoked) {
        void this.options
          .db('mail_keys')
          .where({ id: hit.id })
          .update({ last_used_at: this.options.db.fn.now() })
          .catch(() => undefined);
      }
      if (this.keys.size > 10_000) this.keys.clear();
      this.keys.set(secret, { key: hit, at: Date.now() });
    }
    if (!hit) throw new DataPlaneError(401, 'authentication_error', 'invalid_api_key', 'The sending key is not valid.');
    if (hit.revoked) throw new DataPlaneError(401, 'authentication_error', 'api_key_revoked', 'The sending key was revoked.');
    return hit;
  }

  private async send(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const key = await this.keyOf(req);
    const db = this.options.db;
    const rejected = async (error: DataPlaneError): Promise<never> => {
      await countSend(db, key.serviceId, 'rejected');
      throw error;
    };
    let raw: Buffer;
    try {
      raw = await readBody(req, 5 * 1024 * 1024);
    } catch (err) {
      return rejected(err as DataPlaneError);
    }
    let json: unknown;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch {
      return rejected(new DataPlaneError(400, 'invalid_request_error', 'invalid_json', 'The body must be a JSON object.'));
    }
    const parsed = SendBody.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const keys = issue.code === 'unrecognized_keys' ? issue.keys : [];
      const param = keys.length ? String(keys[0]) : issue.path.join('.') || null;
      const message = keys.length ? `${keys[0]}: is not a field of a message` : `${param ?? 'body'}: ${issue.message}`;
      return rejected(new DataPlaneError(400, 'invalid_request_error', 'validation_failed', message, param));
    }
    const body: Send = parsed.data;
    const idempotencyKey = typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : null;
    if (idempotencyKey !== null && (idempotencyKey.length === 0 || idempotencyKey.length > 255)) {
      return rejected(new DataPlaneError(400, 'invalid_request_error', 'validation_failed', 'Idempotency-Key: 1 to 255 characters', 'Idempotency-Key'));
    }
    const requestHash = createHash('sha256').update(raw).digest('hex');
    if (idempotencyKey) {
      const replay = await this.replay(key.serviceId, idempotencyKey, requestHash);
      if (replay) return void this.answer(res, 202, replay, { 'Idempotent-Replayed': 'true' });
    }
    const from = parseMailbox(body.from)!;
    // The From domain, the gateway and its service's status in one read.
    const found = await db('mail_domains as d')
      .join('mail_gateways as g', 'g.service_id', 'd.service_id')
      .join('services as s', 's.id', 'd.service_id')
      .where({ 'd.service_id': key.serviceId, 'd.domain': from.domain })
      .first(
        'd.status as domain_status',
        'd.mail_from_host',
        'g.plan',
        'g.api_endpoint',
        'g.sending_suspended_at',
        'g.sending_suspended_reason',
        's.status as service_status',
      );
    if (!found || found.domain_status !== 'verified') {
      return rejected(
        new DataPlaneError(
          403,
          'authorization_error',
          'domain_not_verified',
          `The domain ${from.domain} is not a verified sending domain of this gateway.`,
          'from',
        ),
      );
    }
    if (found.service_status !== 'active') {
      return rejected(new DataPlaneError(403, 'authorization_error', 'sending_suspended', `The mail gateway is ${found.service_status}; it sends nothing.`));
    }
    if (found.sending_suspended_at) {
      return rejected(
        new DataPlaneError(
          403,
          'authorization_error',
          'sending_suspended',
          `Sending is suspended: ${found.sending_suspended_reason ?? 'see the mail gateway'}.`,
        ),
      );
    }
    const limit = monthlyLimitOf(found.plan);
    const overQuota = () => new DataPlaneError(429, 'rate_limit_error', 'quota_exceeded', `This month's ${limit} sends are used up.`);
    const id = newMessageId();
    const to = list(body.to).map((r) => parseMailbox(r)!);
    const cc = list(body.cc).map((r) => parseMailbox(r)!);
    const bcc = list(body.bcc).map((r) => parseMailbox(r)!);
    const recipients = [...to, ...cc, ...bcc].map((r) => r.address);
    const acceptedAt = new Date();
    const outcome = await db.transaction(async (trx): Promise<'recorded' | 'raced' | 'over quota'> => {
      if (idempotencyKey) {
        const claimed = await trx('mail_idempotency')
          .insert({ service_id: key.serviceId, key: idempotencyKey, request_hash: requestHash, message_id: id })
          .onConflict(['service_id', 'key'])
          .ignore()
          .returning('key');
        if (claimed.length === 0) return 'raced';
      }
      const recorded = await recordWithinQuota(
        trx,
        { id, serviceId: key.serviceId, domain: from.domain, from: from.address, subject: body.subject, recipients, via: 'api', at: acceptedAt },
        limit,
      );
      if (!recorded) return 'over quota';
      return 'recorded';
    });
    if (outcome === 'over quota') return rejected(overQuota());
    if (outcome === 'raced') {
      // The same key, claimed by a concurrent request: its answer once it has one.
      const replay = await this.replay(key.serviceId, idempotencyKey!, requestHash);
      if (replay) return void this.answer(res, 202, replay, { 'Idempotent-Replayed': 'true' });
      throw new DataPlaneError(409, 'invalid_request_error', 'idempotency_key_in_use', 'A request with this Idempotency-Key is still running; retry shortly.');
    }
    try {
      await this.transport.sendMail({
        envelope: { from: `bounce+${id}@${found.mail_from_host}`, to: recipients },
        messageId: `<${id}@${from.domain}>`,
        date: new Date(),
        from: forHeader(from),
        to: to.map(forHeader),
        cc: cc.length ? cc.map(forHeader) : undefined,
        subject: body.subject,
        text: body.text,
        html: body.track_opens && body.html ? withPixel(body.html, this.pixelUrl(found.api_endpoint, id)) : body.html,
      });
    } catch (err) {
      await this.undo(key.serviceId, id);
      this.options.onError?.(err as Error);
      throw new DataPlaneError(503, 'api_error', 'backend_unavailable', 'The mail server did not take the message; nothing was sent. Try again.');
    }
    // The answer from what was recorded (queued, every recipient queued), without reading it back.
    const answer = messageView(
      { id, domain: from.domain, from: from.address, subject: body.subject, status: 'queued', created_at: acceptedAt, updated_at: acceptedAt },
      [...new Set(recipients.map((r) => r.toLowerCase()))].sort().map((email) => ({ email, status: 'queued', response: null })),
    );
    if (idempotencyKey) {
      await db('mail_idempotency')
        .where({ service_id: key.serviceId, key: idempotencyKey })
        .update({ completed_at: db.fn.now(), response: JSON.stringify(answer) });
    }
    this.answer(res, 202, answer);
  }

  /**
   * The stored answer to an `Idempotency-Key`: null when the key is new, `422` when the body differs,
   * `409` while its first request is still being handed to the MTA.
   */
  private async replay(serviceId: number, key: string, requestHash: string): Promise<unknown | null> {
    const row = await this.options.db('mail_idempotency').where({ service_id: serviceId, key }).first();
    if (!row) return null;
    if (row.request_hash !== requestHash) {
      throw new DataPlaneError(
        422,
        'invalid_request_error',
        'idempotency_key_reused',
        'This Idempotency-Key was used with a different body. Use a new key for a new message.',
      );
    }
    if (!row.completed_at) {
      throw new DataPlaneError(409, 'invalid_request_error', 'idempotency_key_in_use', 'A request with this Idempotency-Key is still running; retry shortly.');
    }
    return row.response;
  }

  /** A message the MTA did not take: as if it was never sent (record, count and idempotency key). */
  private async undo(serviceId: number, id: string): Promise<void> {
    await this.options.db.transaction(async (trx) => {
      const message = await trx('mail_messages').where({ id }).first('created_at');
      await trx('mail_idempotency').where({ message_id: id }).delete();
      await trx('mail_messages').where({ id }).delete();
      if (message) {
        await trx('mail_usage_days')
          .where({ service_id: serviceId, day: new Date(message.created_at).toISOString().slice(0, 10) })
          .update({ accepted: trx.raw('greatest(accepted - 1, 0)') });
      }
    });
  }

  private pixelUrl(apiEndpoint: string, id: string): string {
    return `${apiEndpoint}/o/${id}.${this.pixelSignature(id)}.gif`;
  }

  private pixelSignature(id: string): string {
    return createHmac('sha256', this.options.keyring.derive('mail-open-pixel')).update(id).digest('hex').slice(0, 32);
  }

  /** The open pixel: answers the GIF whatever happens (a mail client shows nothing either way); a genuine one records `opened`. */
  private async opened(res: http.ServerResponse, id: string, signature: string): Promise<void> {
    const genuine = timingSafeEqual(Buffer.from(signature), Buffer.from(this.pixelSignature(id)));
    // The first open only: a pixel fetched again (or by anyone holding its URL) adds nothing.
    const seen = genuine && (await this.options.db('mail_events').where({ message_id: id, kind: 'opened' }).first('id'));
    if (genuine && !seen) {
      await recordOutcome(this.options.db, { messageId: id, recipient: null, kind: 'opened', response: null, at: new Date() }).catch((err: Error) =>
        this.options.onError?.(err),
      );
    }
    res.writeHead(200, { 'Content-Type': 'image/gif', 'Content-Length': PIXEL.length, 'Cache-Control': 'no-store' });
    res.end(PIXEL);
  }

  private answer(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', ...headers });
    res.end(JSON.stringify(body));
  }
}

interface KeyHit {
  id: number;
  serviceId: number;
  revoked: boolean;
}

function withPixel(html: string, url: string): string {
  const img = `<img src="${url}" width="1" height="1" alt="" style="display:none">`;
  return /<\/body>/i.test(html) ? html.replace(/<\/body>/i, `${img}</body>`) : `${html}${img}`;
}
