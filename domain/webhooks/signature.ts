import { createHmac } from 'node:crypto';

/**
 * `Cloud-Signature: t=<unix_seconds>,v1=<hex>`: HMAC-SHA256 of `<t>.<raw body>` keyed by the
 * webhook secret (SPEC Events "Delivery request"). Computed afresh for every attempt.
 */
export function signPayload(secret: string, body: string, timestampSeconds: number = Math.floor(Date.now() / 1000)): string {
  const hex = createHmac('sha256', secret).update(`${timestampSeconds}.${body}`, 'utf8').digest('hex');
  return `t=${timestampSeconds},v1=${hex}`;
}
