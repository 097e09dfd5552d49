import { timingSafeEqual } from 'node:crypto';
import type { Knex } from 'knex';
import { randomBase62, sha256Hex, type Keyring } from '../../common/crypto';
import { HarakaServer, submissionAddress } from '../../providers/haraka/haraka.server';
import { conflict } from '../errors';
import { lockGateway, type GatewayRow } from './store';

/**
 * SMTP submission credentials (SPEC "Mail gateway": `/v1/mail-gateway/smtp`). A gateway has at most
 * one active credential; rotating deactivates it for good and makes another. Passwords are made here
 * (40 base62 characters, about 238 bits), so a SHA-256 is enough to keep (as for API keys): a slow
 * hash would cost every SMTP connection a fraction of a CPU second for nothing.
 *
 * The platform's own `/emails` data plane submits to the same MTA as the user `platform`, with a
 * password derived from the master key: any process holding the master key can compute it, and
 * nothing stores it.
 */
export const PLATFORM_USERNAME = 'platform';

export function platformPassword(keyring: Keyring): string {
  return keyring.sign('mail-platform-submission', PLATFORM_USERNAME).toString('base64url');
}

export interface SmtpCredential {
  username: string;
  password: string;
}

export async function activeSmtpUsername(db: Knex, serviceId: number): Promise<string | null> {
  const row = await db('mail_smtp_credentials').where({ service_id: serviceId }).whereNull('deactivated_at').first('username');
  return row?.username ?? null;
}

async function issue(trx: Knex.Transaction, serviceId: number): Promise<SmtpCredential> {
  const credential = { username: `smtp_${randomBase62(16)}`, password: randomBase62(40) };
  await trx('mail_smtp_credentials').insert({ service_id: serviceId, username: credential.username, password_hash: sha256Hex(credential.password) });
  return credential;
}

/** Makes the gateway's credential; `409 conflict` while one is active (rotate it instead). */
export async function createSmtpCredential(db: Knex, gateway: GatewayRow): Promise<SmtpCredential> {
  return db.transaction(async (trx) => {
    await lockGateway(trx, gateway.service_id);
    const active = await trx('mail_smtp_credentials').where({ service_id: gateway.service_id }).whereNull('deactivated_at').first('id');
    if (active) throw conflict('The gateway has an active SMTP credential: rotate it to get a new password (it is shown only once).');
    return issue(trx, gateway.service_id);
  });
}

/** Deactivates the active credential (for good) and makes a new one. */
export async function rotateSmtpCredential(db: Knex, gateway: GatewayRow): Promise<SmtpCredential> {
  return db.transaction(async (trx) => {
    await lockGateway(trx, gateway.service_id);
    await trx('mail_smtp_credentials').where({ service_id: gateway.service_id }).whereNull('deactivated_at').update({ deactivated_at: trx.fn.now() });
    return issue(trx, gateway.service_id);
  });
}

/** The gateway an active credential belongs to, or null (unknown, wrong password, deactivated). */
export async function gatewayOfCredential(db: Knex, username: string, password: string): Promise<number | null> {
  const row = await db('mail_smtp_credentials').where({ username }).whereNull('deactivated_at').first('service_id', 'password_hash');
  if (!row) return null;
  const given = Buffer.from(sha256Hex(password), 'hex');
  return timingSafeEqual(given, Buffer.from(row.password_hash, 'hex')) ? Number(row.service_id) : null;
}

/** Where customers submit: this host's MTA (its port is kept in its data directory from its first start). */
export function smtpAddressOf(config: { MAIL_DATA_DIR: string; MAIL_SMTP_PORT: number; MAIL_SMTP_HOST?: string }): { host: string; port: number } {
  const settings = HarakaServer.settingsOf(config.MAIL_DATA_DIR);
  const address = settings ? submissionAddress(settings) : { host: '127.0.0.1', port: config.MAIL_SMTP_PORT };
  return { host: config.MAIL_SMTP_HOST ?? address.host, port: address.port };
}
