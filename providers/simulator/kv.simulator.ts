import type { Knex } from 'knex';
import { BackendUnavailableError } from '../errors';
import { checkEntry, checkTenant, type KvStore } from '../kv.provider';

/**
 * The kv primitive's fallback store (`KV_BACKEND=simulator`): the control plane's PostgreSQL,
 * table `sim_kv_entries(tenant, ns, key bytea, value bytea)`. Same contract as the Redis store
 * (test/kv.contract.ts), without a server to run; stored bytes are summed on read rather than kept
 * in a counter (a simulator's tenants are small).
 *
 * Tenants need nothing of their own here, so `ensureTenant` only checks the handle.
 */
const BACKEND = 'kv';
const TABLE = 'sim_kv_entries';

/** Node and PostgreSQL codes of a database that does not answer (refused, reset, shutting down, pool timeout): an outage, not a bug. */
const UNAVAILABLE = /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EHOSTUNREACH|57P0[1-3]|08\d{3}|53300)$/;

export class PostgresKvStore implements KvStore {
  readonly kind = 'postgresql' as const;

  constructor(private readonly db: Knex) {}

  async ensureTenant(tenant: string): Promise<void> {
    checkTenant(tenant);
  }

  async get(tenant: string, ns: string, key: Buffer): Promise<Buffer | null> {
    checkEntry(tenant, ns, key);
    const row = await this.guard(() => this.db(TABLE).where({ tenant, ns, key }).first<{ value: Buffer } | undefined>('value'));
    return row ? row.value : null;
  }

  async put(tenant: string, ns: string, key: Buffer, value: Buffer): Promise<number> {
    checkEntry(tenant, ns, key);
    if (!Buffer.isBuffer(value)) throw new TypeError('a kv value is a Buffer');
    return this.guard(() =>
      this.db.transaction(async (trx) => {
        await trx(TABLE).insert({ tenant, ns, key, value }).onConflict(['tenant', 'ns', 'key']).merge(['value']);
        return sumOf(trx, tenant);
      }),
    );
  }

  async delete(tenant: string, ns: string, key: Buffer): Promise<number> {
    checkEntry(tenant, ns, key);
    return this.guard(() =>
      this.db.transaction(async (trx) => {
        await trx(TABLE).where({ tenant, ns, key }).delete();
        return sumOf(trx, tenant);
      }),
    );
  }

  async storedBytes(tenant: string): Promise<number> {
    checkTenant(tenant);
    return this.guard(() => sumOf(this.db, tenant));
  }

  async dropTenant(tenant: string): Promise<void> {
    checkTenant(tenant);
    await this.guard(() => this.db(TABLE).where({ tenant }).delete());
  }

  /** The knex instance is the caller's: closing the store leaves it open. */
  async close(): Promise<void> {}

  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      const unavailable = (typeof code === 'string' && UNAVAILABLE.test(code)) || (err instanceof Error && err.name === 'KnexTimeoutError');
      if (unavailable) throw new BackendUnavailableError(BACKEND, (err as Error).message);
      throw err;
    }
  }
}

/** The formula of KvStore.storedBytes: len(ns) + 1 + len(key) + len(value) over the tenant's entries. */
async function sumOf(db: Knex, tenant: string): Promise<number> {
  const row = await db(TABLE)
    .where({ tenant })
    .first<{ bytes: string | number | null }>(db.raw('sum(octet_length(ns) + 1 + octet_length(key) + octet_length(value)) as bytes'));
  return Number(row?.bytes ?? 0);
}
