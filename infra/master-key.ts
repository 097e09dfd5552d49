import type { Knex } from 'knex';
import { randomBytes } from 'node:crypto';
import { Keyring } from '../common/crypto';

/**
 * The instance master key: CLOUD_MASTER_KEY when set (required in production); otherwise, for local
 * runs and tests, a key generated once and kept in the database so every process of the instance
 * agrees on it.
 */
export async function loadKeyring(db: Knex, configured: string | undefined): Promise<Keyring> {
  if (configured) return Keyring.fromString(configured);
  await db('instance_settings')
    .insert({ key: 'dev_master_key', value: randomBytes(32).toString('hex') })
    .onConflict('key')
    .ignore();
  const row = await db('instance_settings').where({ key: 'dev_master_key' }).first();
  return Keyring.fromString(row.value);
}
