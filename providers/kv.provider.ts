/**
 * The kv primitive's storage (SPEC "Serverless", DECISIONS "Serverless": kv): binary keys and values
 * per tenant and namespace, with the tenant's stored bytes kept exact on every write so the data
 * plane can enforce a plan's quota and meter storage without a sweep.
 *
 * Two engines keep the same contract (test/kv.contract.ts): Redis 7 with one ACL user per tenant
 * (providers/redis/kv.redis.ts, the real one) and a PostgreSQL table (providers/simulator/kv.simulator.ts,
 * `KV_BACKEND=simulator`).
 */

/** The kv primitive's storage (SPEC "Serverless", DECISIONS "Serverless": kv). Tenants are handles `^[a-z0-9]{1,32}$` the control plane made; namespaces match `^[a-z0-9][a-z0-9-]{0,62}$`; keys are 1..512 arbitrary bytes; values any bytes. */
export interface KvStore {
  readonly kind: 'redis' | 'postgresql';
  /** Makes whatever the tenant needs (its Redis ACL user); idempotent. */
  ensureTenant(tenant: string): Promise<void>;
  get(tenant: string, ns: string, key: Buffer): Promise<Buffer | null>;
  /** Stores the value; returns the tenant's stored bytes after the write. */
  put(tenant: string, ns: string, key: Buffer, value: Buffer): Promise<number>;
  /** Removes the key (absent: nothing happens); returns the tenant's stored bytes after. */
  delete(tenant: string, ns: string, key: Buffer): Promise<number>;
  /** The tenant's stored bytes: the sum over its entries of len(ns) + 1 + len(key) + len(value). */
  storedBytes(tenant: string): Promise<number>;
  /** Deletes every entry of the tenant and its ACL user (termination). */
  dropTenant(tenant: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Tenant handles: made by the control plane, never a customer's string. Only lower-case letters and
 * digits, so a handle can name a Redis key prefix, an ACL user and a glob pattern without escaping.
 */
export const KV_TENANT_PATTERN = /^[a-z0-9]{1,32}$/;
/** Namespaces: no `:` (the Redis key prefix `kv:<tenant>:<ns>:` stays unambiguous) and never empty (the empty one holds the byte counter). */
export const KV_NAMESPACE_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const KV_MAX_KEY_BYTES = 512;

/**
 * A tenant, namespace or key the store refuses. The data plane checks names before they reach a
 * store (and answers 400 with its own words); reaching a store with one is a bug or an attack, so
 * the store refuses rather than trusting its caller. The message names the rule, never the value.
 */
export class KvNameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KvNameError';
  }
}

export function checkTenant(tenant: string): void {
  if (typeof tenant !== 'string' || !KV_TENANT_PATTERN.test(tenant)) throw new KvNameError('a kv tenant is 1 to 32 lower-case letters or digits');
}

export function checkNamespace(ns: string): void {
  if (typeof ns !== 'string' || !KV_NAMESPACE_PATTERN.test(ns)) {
    throw new KvNameError('a kv namespace is 1 to 63 lower-case letters, digits or hyphens, starting with a letter or digit');
  }
}

export function checkKey(key: Buffer): void {
  if (!Buffer.isBuffer(key) || key.length < 1 || key.length > KV_MAX_KEY_BYTES) throw new KvNameError(`a kv key is 1 to ${KV_MAX_KEY_BYTES} bytes`);
}

/** Checks the names of a call on one entry; throws KvNameError. */
export function checkEntry(tenant: string, ns: string, key: Buffer): void {
  checkTenant(tenant);
  checkNamespace(ns);
  checkKey(key);
}

/** What one entry counts towards its tenant's stored bytes (the formula both engines keep). */
export function entryBytes(ns: string, key: Buffer, value: Buffer): number {
  return Buffer.byteLength(ns) + 1 + key.length + value.length;
}
