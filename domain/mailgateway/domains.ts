import { generateKeyPair, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { Resolver } from 'node:dns/promises';
import { normalizeZoneName } from '../dns/names';
import type { DomainRow } from './store';

/**
 * Sending domains (SPEC "Mail gateway domain", DECISIONS "Mail gateway"): the records an account
 * publishes, and the check that they are published.
 *
 * - `dkim`: TXT `<selector>._domainkey.<domain>` = `v=DKIM1; k=rsa; p=<SPKI>`, the domain's own RSA
 *   2048 pair and selector (a new pair when the domain is added again after a delete).
 * - `mail_from_mx`: MX `<bounce host>` = `10 <MX host>`, where bounces to the envelope sender go.
 * - `mail_from_spf` (TXT at the bounce host), `spf` (TXT at the domain), `dmarc` (TXT
 *   `_dmarc.<domain>`): advice, status always `info`.
 *
 * `verify` asks DNS_RESOLVER (or the system's resolver): `dkim` is verified by a TXT there with the
 * same `p=`, `mail_from_mx` by the MX host among the MX set. The domain is `verified` once both are.
 */
export const MAIL_FROM_LABEL = 'bounce';

export interface MailRecord {
  purpose: 'dkim' | 'mail_from_mx' | 'mail_from_spf' | 'spf' | 'dmarc';
  type: 'TXT' | 'MX';
  host: string;
  value: string;
  status: 'pending' | 'verified' | 'info';
}

/** The domain as kept (lower case, ASCII, no final dot); fewer than two labels is `400 validation_failed`, param `domain`. */
export function normalizeMailDomain(input: string): string {
  return normalizeZoneName(input, 'domain');
}

const generateRsa = promisify(generateKeyPair);

/**
 * A fresh DKIM pair: the private key as PKCS#8 PEM, the public key as base64 SPKI (DER), and a
 * selector of its own. Made in libuv's pool (about 50 ms of CPU), not on the event loop.
 */
export async function newDkimKey(): Promise<{ selector: string; publicKey: string; privateKeyPem: string }> {
  const { publicKey, privateKey } = await generateRsa('rsa', { modulusLength: 2048 });
  return {
    selector: `mg${randomBytes(5).toString('hex')}`,
    publicKey: publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

export const dkimValue = (publicKey: string) => `v=DKIM1; k=rsa; p=${publicKey}`;
const spfValue = (mxHost: string) => `v=spf1 a:${mxHost} ~all`;

/** The records of a domain, with its statuses. */
export function recordsOf(domain: DomainRow, mxHost: string): MailRecord[] {
  return [
    {
      purpose: 'dkim',
      type: 'TXT',
      host: `${domain.dkim_selector}._domainkey.${domain.domain}`,
      value: dkimValue(domain.dkim_public),
      status: domain.dkim_status,
    },
    { purpose: 'mail_from_mx', type: 'MX', host: domain.mail_from_host, value: `10 ${mxHost}`, status: domain.mail_from_status },
    { purpose: 'mail_from_spf', type: 'TXT', host: domain.mail_from_host, value: spfValue(mxHost), status: 'info' },
    { purpose: 'spf', type: 'TXT', host: domain.domain, value: spfValue(mxHost), status: 'info' },
    { purpose: 'dmarc', type: 'TXT', host: `_dmarc.${domain.domain}`, value: 'v=DMARC1; p=none', status: 'info' },
  ];
}

/** What DNS says about the two verified records (each true when published as given). */
export interface PublishedRecords {
  dkim: boolean;
  mailFromMx: boolean;
}

/** The `p=` of a DKIM TXT record (whitespace removed, as RFC 6376 allows it inside the value), or null. */
export function dkimPublicKeyOf(txt: string): string | null {
  const tags = txt.split(';').map((t) => t.trim());
  const p = tags.find((t) => /^p\s*=/.test(t));
  return p ? p.replace(/^p\s*=/, '').replace(/\s+/g, '') : null;
}

/** Answers that say the record is not there; any other failure (refused, server failure, timeout) means the check did not happen. */
const NOT_PUBLISHED = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN', 'ENONAME']);

/** Thrown when the resolver cannot be asked at all (times out, unreachable): the check did not happen. */
export class ResolverUnavailable extends Error {}

/**
 * Looks the two records up. A name that does not exist, or has no such record, is "not published";
 * a resolver that does not answer is `ResolverUnavailable` (nothing is changed then).
 */
export async function lookUpRecords(domain: DomainRow, mxHost: string, resolverAddress?: string): Promise<PublishedRecords> {
  const resolver = new Resolver({ timeout: 2_000, tries: 2 });
  if (resolverAddress) resolver.setServers([resolverAddress]);
  const ask = async <T>(query: () => Promise<T[]>): Promise<T[]> => {
    try {
      return await query();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (NOT_PUBLISHED.has(code)) return [];
      throw new ResolverUnavailable(`the DNS resolver did not answer (${code || (err as Error).message})`);
    }
  };
  const [txts, mxs] = await Promise.all([
    ask(() => resolver.resolveTxt(`${domain.dkim_selector}._domainkey.${domain.domain}`)),
    ask(() => resolver.resolveMx(domain.mail_from_host)),
  ]);
  const wanted = mxHost.toLowerCase().replace(/\.$/, '');
  return {
    dkim: txts.some((chunks) => dkimPublicKeyOf(chunks.join('')) === domain.dkim_public),
    mailFromMx: mxs.some((mx) => mx.exchange.toLowerCase().replace(/\.$/, '') === wanted),
  };
}
