import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Deliveries older or newer than this (against your clock) are refused: replay protection. */
export const TOLERANCE_SECONDS = 300;

export interface CloudEvent {
  id: string;
  object: 'event';
  type: string;
  created_at: string;
  data: unknown;
}

export type Verification = { ok: true; event: CloudEvent } | { ok: false; reason: string };

/**
 * Checks a delivery: `rawBody` is the request body exactly as received (before any JSON parsing),
 * `signatureHeader` the `Cloud-Signature` header, `secret` your webhook's secret.
 */
export function verifyWebhook(
  rawBody: Buffer | string,
  signatureHeader: string | undefined,
  secret: string,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): Verification {
  if (!signatureHeader) return { ok: false, reason: 'missing Cloud-Signature header' };

  // "t=<unix seconds>,v1=<hex>": split on commas, then on the first "=".
  let timestamp: string | undefined;
  const signatures: string[] = [];
  for (const part of signatureHeader.split(',')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't') timestamp = value;
    else if (key === 'v1') signatures.push(value);
  }
  if (!timestamp || !/^\d+$/.test(timestamp) || signatures.length === 0) {
    return { ok: false, reason: 'malformed Cloud-Signature header' };
  }
  if (Math.abs(nowSeconds - Number(timestamp)) > TOLERANCE_SECONDS) {
    return { ok: false, reason: 'timestamp outside the tolerance' };
  }

  // HMAC-SHA256 over `t + "." + body`, keyed by the secret.
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody;
  const expected = createHmac('sha256', secret).update(`${timestamp}.`, 'utf8').update(body).digest();

  // Constant-time comparison against every v1 value.
  const matches = signatures.some((hex) => {
    if (!/^[0-9a-fA-F]+$/.test(hex)) return false;
    const given = Buffer.from(hex, 'hex');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!matches) return { ok: false, reason: 'signature does not match' };

  return { ok: true, event: JSON.parse(body.toString('utf8')) as CloudEvent };
}

/**
 * A complete receiver for node:http: reads the raw body, verifies it, answers 2xx quickly, and
 * handles each event id once (the same event can arrive more than once). `seen` stands in for a
 * durable store (a table with a unique key on the event id).
 */
export function webhookHandler(options: {
  secret: () => string;
  onEvent: (event: CloudEvent) => void | Promise<void>;
  seen?: Set<string>;
}) {
  const seen = options.seen ?? new Set<string>();
  return (req: IncomingMessage, res: ServerResponse): void => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const header = req.headers['cloud-signature'];
      const result = verifyWebhook(Buffer.concat(chunks), Array.isArray(header) ? header[0] : header, options.secret());
      if (!result.ok) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(result.reason);
        return;
      }
      if (seen.has(result.event.id)) {
        res.writeHead(200).end('duplicate ignored');
        return;
      }
      seen.add(result.event.id);
      Promise.resolve(options.onEvent(result.event)).then(
        () => res.writeHead(204).end(),
        () => {
          seen.delete(result.event.id); // let the retry try again
          res.writeHead(500).end();
        },
      );
    });
  };
}
