import type { Request } from 'express';
import { constantTimeEqual, type Keyring } from '../common/crypto';

/**
 * The client's address: the peer, or behind a trusted reverse proxy (TRUSTED_PROXIES, Express's
 * `trust proxy`) the nearest address in X-Forwarded-For that is not a trusted proxy.
 */
export function clientIp(req: Request): string | null {
  const addr = req.ip ?? req.socket.remoteAddress ?? null;
  return addr === null ? null : unmapIPv4(addr);
}

/**
 * An IPv4-mapped IPv6 address as the IPv4 address it is, in either spelling (`::ffff:192.0.2.1`,
 * or `::ffff:c000:201` as a proxy may write it); any other address unchanged.
 */
export function unmapIPv4(addr: string): string {
  const dotted = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(addr);
  if (dotted) return dotted[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(addr);
  if (!hex) return addr;
  const [high, low] = [parseInt(hex[1], 16), parseInt(hex[2], 16)];
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}

export function isLoopback(ip: string | null): boolean {
  return ip !== null && (ip === '::1' || ip.startsWith('127.'));
}

/**
 * The client behind a call this server makes to itself. The MCP endpoint (`POST /mcp`) runs each
 * tool as a request back into this server over HTTP, whose peer is this server: the audit log would
 * record its own address instead of the MCP client's. The endpoint names the client in a header
 * that only a process holding CLOUD_MASTER_KEY can sign (any API process, so it holds with
 * API_PROCESSES > 1). The header counts only on a connection from this host's own address to itself
 * (where the self-calls come from), when it verifies and has not aged; otherwise it is ignored.
 */
export const FORWARDED_CLIENT_HEADER = 'cloud-forwarded-client';
const PURPOSE = 'forwarded-client';
/** Long enough for the tool calls of one MCP request (a wait lasts at most 60 s); bounds a replay. */
const MAX_AGE_MS = 10 * 60_000;

const signed = (ip: string, at: string) => `${ip}\n${at}`;

/** `{ip};{ms since epoch};{signature}` for the self-calls made on behalf of the client at `ip`. */
export function forwardedClientHeader(keyring: Keyring, ip: string, now = Date.now()): Record<string, string> {
  const at = String(now);
  return { [FORWARDED_CLIENT_HEADER]: `${ip};${at};${keyring.sign(PURPOSE, signed(ip, at)).toString('base64url')}` };
}

/** The client's address a self-call carries, or null when it carries none that verifies. */
export function forwardedClient(keyring: Keyring, req: Request, now = Date.now()): string | null {
  const value = req.headers[FORWARDED_CLIENT_HEADER];
  if (typeof value !== 'string' || !req.socket.remoteAddress || req.socket.remoteAddress !== req.socket.localAddress) return null;
  const [ip, at, signature, ...rest] = value.split(';');
  if (!ip || !at || !signature || rest.length > 0 || !/^\d{1,15}$/.test(at)) return null;
  const age = now - Number(at);
  if (age < -60_000 || age > MAX_AGE_MS) return null;
  return constantTimeEqual(Buffer.from(signature, 'base64url'), keyring.sign(PURPOSE, signed(ip, at))) ? ip : null;
}
