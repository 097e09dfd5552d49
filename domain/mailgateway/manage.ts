import type { Knex } from 'knex';
import { randomBase62, type Keyring } from '../../common/crypto';
import { DomainError, notFound, quotaExceeded } from '../errors';
import { lookUpRecords, MAIL_FROM_LABEL, newDkimKey, normalizeMailDomain, ResolverUnavailable } from './domains';
import { DKIM_KEY_PURPOSE, findDomain, lockGateway, secretHash, type DomainRow, type GatewayRow, type KeyRow } from './store';

/**
 * Changes to a mail gateway's domains and sending keys (SPEC "Mail gateway"), each under the
 * gateway's row lock. DKIM private keys are sealed at rest; key secrets are kept as SHA-256 only.
 */
export const newKeySecret = () => `mg_live_${randomBase62(40)}`;

/** Sending domains per gateway (SPEC leaves it "not shown"): past it `429 quota_exceeded`. */
export const MAX_DOMAINS = 50;

async function countDomains(db: Knex | Knex.Transaction, serviceId: number): Promise<number> {
  const [row] = await db('mail_domains').where({ service_id: serviceId }).count<{ count: string }[]>({ count: '*' });
  return Number(row.count);
}

/**
 * Adds a sending domain (`pending`), with a DKIM pair of its own. Adding one that is there already
 * changes nothing and returns it (the same key pair, so the same records): `created` tells which.
 */
export async function addDomain(db: Knex, keyring: Keyring, gateway: GatewayRow, input: string): Promise<{ domain: DomainRow; created: boolean }> {
  const name = normalizeMailDomain(input);
  const existing = await findDomain(db, gateway.service_id, name);
  if (existing) return { domain: existing, created: false };
  const full = () => quotaExceeded(`A mail gateway has at most ${MAX_DOMAINS} sending domains; delete one first.`);
  if ((await countDomains(db, gateway.service_id)) >= MAX_DOMAINS) throw full();
  // The pair is made outside the lock; a concurrent add of the same name keeps the first.
  const key = await newDkimKey();
  return db.transaction(async (trx) => {
    await lockGateway(trx, gateway.service_id);
    const again = await findDomain(trx, gateway.service_id, name);
    if (again) return { domain: again, created: false };
    if ((await countDomains(trx, gateway.service_id)) >= MAX_DOMAINS) throw full();
    await trx('mail_domains').insert({
      service_id: gateway.service_id,
      domain: name,
      dkim_selector: key.selector,
      dkim_public: key.publicKey,
      dkim_private_sealed: keyring.encrypt(DKIM_KEY_PURPOSE, key.privateKeyPem),
      mail_from_host: `${MAIL_FROM_LABEL}.${name}`,
    });
    return { domain: (await findDomain(trx, gateway.service_id, name))!, created: true };
  });
}

/** The domain named in a path, or 404 (a name that cannot be a domain names none). */
export async function domainNamed(db: Knex, gateway: GatewayRow, input: string): Promise<DomainRow> {
  let name: string;
  try {
    name = normalizeMailDomain(input);
  } catch {
    throw notFound('mail domain');
  }
  const domain = await findDomain(db, gateway.service_id, name);
  if (!domain) throw notFound('mail domain');
  return domain;
}

/** Stops sending from the domain and forgets its key pair (published records stay where they are). */
export async function deleteDomain(db: Knex, gateway: GatewayRow, domain: DomainRow): Promise<void> {
  await db.transaction(async (trx) => {
    await lockGateway(trx, gateway.service_id);
    await trx('mail_domains').where({ id: domain.id }).delete();
  });
}

/**
 * Looks the domain's records up now and moves the statuses: each verified record stays verified
 * (a record is not un-verified by a later miss), and the domain becomes `verified` once `dkim` and
 * `mail_from_mx` both are. A resolver that does not answer changes nothing: `503 backend_unavailable`.
 */
export async function verifyDomain(db: Knex, gateway: GatewayRow, domain: DomainRow, mxHost: string, resolver?: string): Promise<DomainRow> {
  let published;
  try {
    published = await lookUpRecords(domain, mxHost, resolver);
  } catch (err) {
    if (err instanceof ResolverUnavailable) {
      throw new DomainError(503, 'api_error', 'backend_unavailable', `The domain could not be checked: ${err.message}. Try again.`);
    }
    throw err;
  }
  return db.transaction(async (trx) => {
    await lockGateway(trx, gateway.service_id);
    const current = await findDomain(trx, gateway.service_id, domain.domain);
    if (!current || current.id !== domain.id) throw notFound('mail domain');
    const dkim = current.dkim_status === 'verified' || published.dkim ? 'verified' : 'pending';
    const mailFrom = current.mail_from_status === 'verified' || published.mailFromMx ? 'verified' : 'pending';
    const verified = dkim === 'verified' && mailFrom === 'verified';
    await trx('mail_domains')
      .where({ id: current.id })
      .update({
        dkim_status: dkim,
        mail_from_status: mailFrom,
        status: verified ? 'verified' : 'pending',
        verified_at: current.verified_at ?? (verified ? trx.fn.now() : null),
      });
    return (await findDomain(trx, gateway.service_id, current.domain))!;
  });
}

/** A new sending key; its secret is returned here only. */
export async function createKey(db: Knex, gateway: GatewayRow, name: string): Promise<KeyRow & { secret: string }> {
  const secret = newKeySecret();
  const [row] = await db('mail_keys')
    .insert({ service_id: gateway.service_id, name, secret_hash: secretHash(secret) })
    .returning(['id', 'service_id', 'name', 'created_at', 'last_used_at', 'revoked_at']);
  return { ...row, id: Number(row.id), service_id: Number(row.service_id), secret };
}

/** Revokes a key (for good; revoking it again changes nothing). 404 for a key of another gateway. */
export async function revokeKey(db: Knex, gateway: GatewayRow, keyId: number): Promise<KeyRow> {
  const [row] = await db('mail_keys')
    .where({ id: keyId, service_id: gateway.service_id })
    .update({ revoked_at: db.raw('coalesce(revoked_at, now())') })
    .returning(['id', 'service_id', 'name', 'created_at', 'last_used_at', 'revoked_at']);
  if (!row) throw notFound('mail key');
  return { ...row, id: Number(row.id), service_id: Number(row.service_id) };
}
