import { createHmac, createHash } from 'node:crypto';
import { createClient, ErrorReply, RESP_TYPES, type RedisArgument } from 'redis';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { checkEntry, checkTenant, type KvStore } from '../kv.provider';

/**
 * The kv primitive on Redis 7 (docs/research/serverless-backends.md section 1).
 *
 * - Layout: an entry is the string key `kv:<tenant>:<ns>:<key bytes>` (a namespace has no `:`, so
 *   the prefix is unambiguous; keys and values are binary-safe, sent and read as Buffers). The
 *   tenant's stored bytes live at `kv:<tenant>::bytes`: the empty namespace, which no entry can have.
 * - Metering: writes go through a Redis Function library (`cloudkv`, loaded with FUNCTION LOAD
 *   REPLACE by the admin connection) that sets or deletes the entry and moves the counter in the
 *   same atomic call, so the counter is exact without a sweep (a SCAN walks the whole keyspace).
 * - Fences: the store prefixes every key with the caller's tenant, and the data path (get, put,
 *   delete) runs on a connection logged in as the tenant's own ACL user `kv-<tenant>`, which may
 *   touch only `kv:<tenant>:*` and run only the few commands the data path needs. A bug that built
 *   another tenant's key would meet NOPERM. Tenants never get SCAN, KEYS, EVAL or MEMORY (SCAN
 *   ignores key patterns and would list every tenant's keys); listing and dropping run as admin.
 * - Passwords: a tenant user's password is derived from the admin secret (HMAC), so nothing but
 *   the admin secret is stored, and Redis holds only its SHA-256 (`#<hash>`).
 *
 * The store talks to a Redis at `host:port` (providers/redis/redis.server.ts starts one; any other
 * works with the same users): it does not start or stop servers.
 */
const BACKEND = 'kv';
const LIBRARY = 'cloudkv';
/** Where the counter key ends: `kv:<tenant>:` + `:bytes`. */
const COUNTER_SUFFIX = ':bytes';

/**
 * The metering functions. KEYS[1] is the entry's key `kv:<t>:<ns>:<key>`, KEYS[2] the tenant's
 * counter `kv:<t>::bytes`. An entry counts len(ns) + 1 + len(key) + len(value): its Redis key less
 * the tenant prefix `kv:<t>:` (the counter key less `:bytes`), plus its value. Both keys must share
 * that prefix, so a call can never move one tenant's counter with another's entry.
 * Deleting runs when Redis is full (`allow-oom`: it only frees memory); putting does not.
 */
const FUNCTIONS = `#!lua name=${LIBRARY}
local function entry_name_bytes(keys)
  local prefix = #keys[2] - ${COUNTER_SUFFIX.length}
  if string.sub(keys[1], 1, prefix) ~= string.sub(keys[2], 1, prefix) then
    return redis.error_reply('ERR cloudkv: entry and counter of different tenants')
  end
  return #keys[1] - prefix
end

redis.register_function('kv_put', function(keys, args)
  local name = entry_name_bytes(keys)
  if type(name) == 'table' then return name end
  -- STRLEN is 0 for an absent key and for an empty value: only then does EXISTS tell them apart.
  local old = redis.call('STRLEN', keys[1])
  local delta = name + #args[1]
  if old > 0 or redis.call('EXISTS', keys[1]) == 1 then delta = #args[1] - old end
  redis.call('SET', keys[1], args[1])
  return redis.call('INCRBY', keys[2], delta)
end)

redis.register_function{function_name = 'kv_del', flags = {'allow-oom'}, callback = function(keys, args)
  local name = entry_name_bytes(keys)
  if type(name) == 'table' then return name end
  if redis.call('EXISTS', keys[1]) == 0 then return tonumber(redis.call('GET', keys[2]) or '0') end
  local delta = name + redis.call('STRLEN', keys[1])
  redis.call('DEL', keys[1])
  return redis.call('INCRBY', keys[2], -delta)
end}
`;

/**
 * A tenant user's rights: its own keys, no channels, and only the commands of the data path and of
 * the functions it calls (scripts run with the caller's ACL). Never SCAN, KEYS, EVAL or MEMORY.
 */
const TENANT_COMMANDS = ['+get', '+fcall', '+set', '+del', '+exists', '+strlen', '+incrby', '+ping', '+hello', '+auth'];

export interface RedisKvOptions {
  host: string;
  port: number;
  /** A Unix socket to use instead of `host:port` (redis.server.ts `RedisAdminConnection.path`). */
  path?: string;
  /** The admin user (redis.server.ts's `redisAdminConnection`): every key and command. */
  username: string;
  password: string;
  /** Tenant connections kept open at most; the least recently used one is closed past this (default 64). */
  maxTenantConnections?: number;
  /** A command without an answer within this fails as BackendUnavailableError (default 5 s). */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
}

/** The part of a node-redis client the store uses. */
interface Connection {
  sendCommand<T>(args: ReadonlyArray<RedisArgument>): Promise<T>;
  close(): Promise<void>;
  destroy(): void;
  readonly isReady: boolean;
  readonly isOpen: boolean;
}

/** Where `run` gets a connection (the admin one, or a tenant's from the LRU) and forgets a broken one. */
interface Slot {
  get(): Promise<Connection>;
  forget(stale: Promise<Connection>): void;
  /** Told of the connection a command is about to go to. */
  ready?(pending: Promise<Connection>, connection: Connection): void;
}

/** The tenant connection of the last call, when it was ready (RedisKvStore.tenantCommand). */
interface Hot {
  tenant: string;
  pending: Promise<Connection>;
  connection: Connection;
}

const userOf = (tenant: string) => `kv-${tenant}`;
const prefixOf = (tenant: string) => Buffer.from(`kv:${tenant}:`);
const counterOf = (tenant: string) => Buffer.from(`kv:${tenant}:${COUNTER_SUFFIX}`);
/** `kv:<tenant>:<ns>:` + the key's bytes, in one allocation (tenant and namespace are ASCII: checked before). */
function entryKey(tenant: string, ns: string, key: Buffer): Buffer {
  const prefixBytes = tenant.length + ns.length + 5;
  const out = Buffer.allocUnsafe(prefixBytes + key.length);
  out.write(`kv:${tenant}:${ns}:`, 0, 'latin1');
  key.copy(out, prefixBytes);
  return out;
}
/** A glob pattern matching exactly the keys that begin with `prefix` (SCAN MATCH). */
const globPrefix = (prefix: Buffer) => Buffer.concat([Buffer.from(prefix.toString('latin1').replace(/[*?[\]\\]/g, '\\$&'), 'latin1'), Buffer.from('*')]);

/**
 * A tenant's ACL user and password: derived from the admin secret (HMAC-SHA256), so the store keeps
 * nothing per tenant and any process with the admin secret reaches the same users. For an
 * operator's own connection, and for tests of the ACL fence.
 */
export function redisTenantCredentials(adminPassword: string, tenant: string): { username: string; password: string } {
  checkTenant(tenant);
  return { username: userOf(tenant), password: createHmac('sha256', adminPassword).update(`cloud kv tenant ${tenant}`).digest('base64url') };
}

export class RedisKvStore implements KvStore {
  readonly kind = 'redis' as const;
  private admin: Promise<Connection> | null = null;
  /** Tenant connections, least recently used first (a Map keeps insertion order). */
  private readonly tenants = new Map<string, Promise<Connection>>();
  private closed = false;
  private hot: Hot | null = null;
  /** The tenant whose connection was asked for last (the end of `tenants`). */
  private lastUsed = '';
  /** Counter keys by tenant. */
  private readonly counters = new Map<string, Buffer>();

  constructor(private readonly options: RedisKvOptions) {}

  private tenantPassword(tenant: string): string {
    return redisTenantCredentials(this.options.password, tenant).password;
  }

  async ensureTenant(tenant: string): Promise<void> {
    checkTenant(tenant);
    const hash = createHash('sha256').update(this.tenantPassword(tenant)).digest('hex');
    await this.asAdmin(async (admin) => {
      await admin.sendCommand([
        'ACL',
        'SETUSER',
        userOf(tenant),
        'on',
        'resetpass',
        `#${hash}`,
        'resetkeys',
        `~kv:${tenant}:*`,
        'resetchannels',
        '-@all',
        ...TENANT_COMMANDS,
      ]);
      await admin.sendCommand(['ACL', 'SAVE']);
    });
  }

  // The data path's three methods return the command's own promise (an async function around it
  // would add a promise and its ticks to every request); a refused argument is a rejection all the same.

  get(tenant: string, ns: string, key: Buffer): Promise<Buffer | null> {
    try {
      checkEntry(tenant, ns, key);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.tenantCommand<Buffer | null>(tenant, ['GET', entryKey(tenant, ns, key)]);
  }

  put(tenant: string, ns: string, key: Buffer, value: Buffer): Promise<number> {
    try {
      checkEntry(tenant, ns, key);
      if (!Buffer.isBuffer(value)) throw new TypeError('a kv value is a Buffer');
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.meter(tenant, ['FCALL', 'kv_put', '2', entryKey(tenant, ns, key), this.counterOf(tenant), value]);
  }

  delete(tenant: string, ns: string, key: Buffer): Promise<number> {
    try {
      checkEntry(tenant, ns, key);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.meter(tenant, ['FCALL', 'kv_del', '2', entryKey(tenant, ns, key), this.counterOf(tenant)]);
  }

  async storedBytes(tenant: string): Promise<number> {
    checkTenant(tenant);
    // As admin: a billing pass reads many tenants, and must not open a connection for each.
    const counter = await this.asAdmin((admin) => admin.sendCommand<Buffer | null>(['GET', counterOf(tenant)]));
    return counter ? Number(counter.toString('latin1')) : 0;
  }

  /**
   * The user goes first: Redis disconnects its clients with it, so no write of the data path can
   * land behind the sweep. Then every key of the prefix (the counter too), in SCAN batches. A
   * repeated call finishes what an interrupted one left.
   */
  async dropTenant(tenant: string): Promise<void> {
    checkTenant(tenant);
    await this.forgetTenant(tenant);
    await this.asAdmin(async (admin) => {
      await admin.sendCommand(['ACL', 'DELUSER', userOf(tenant)]);
      await admin.sendCommand(['ACL', 'SAVE']);
      const match = globPrefix(prefixOf(tenant));
      let cursor = '0';
      do {
        const [next, keys] = await admin.sendCommand<[Buffer, Buffer[]]>(['SCAN', cursor, 'MATCH', match, 'COUNT', '1000']);
        if (keys.length > 0) await admin.sendCommand(['UNLINK', ...keys]);
        cursor = next.toString('latin1');
      } while (cursor !== '0');
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.hot = null;
    const all = [...this.tenants.values(), ...(this.admin ? [this.admin] : [])];
    this.tenants.clear();
    this.admin = null;
    await Promise.all(all.map((c) => c.then(closeQuietly, () => undefined)));
  }

  /** A metered write; the library is loaded again when Redis lost it (a server whose data was wiped). */
  private meter(tenant: string, command: RedisArgument[]): Promise<number> {
    // then/catch, not async/await: one promise less per write on the data path.
    return this.tenantCommand<number>(tenant, command).then(Number, async (err: unknown) => {
      if (!(err instanceof ErrorReply) || !/function not found/i.test(err.message)) throw err;
      await this.asAdmin((admin) => admin.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', FUNCTIONS]));
      return Number(await this.tenantCommand<number>(tenant, command));
    });
  }

  /** The tenant's counter key (`kv:<t>::bytes`), made once per tenant. */
  private counterOf(tenant: string): Buffer {
    let counter = this.counters.get(tenant);
    if (!counter) {
      if (this.counters.size >= 10_000) this.counters.clear();
      this.counters.set(tenant, (counter = counterOf(tenant)));
    }
    return counter;
  }

  /**
   * One command on the tenant's connection. The tenant of the previous call, whose connection is
   * open, ready and already the most recently used, is sent to directly (the usual case: no
   * look-up, no closures); anything else goes through `run`, which makes or replaces connections.
   */
  private tenantCommand<T>(tenant: string, args: ReadonlyArray<RedisArgument>): Promise<T> {
    const hot = this.hot;
    if (hot !== null && hot.tenant === tenant && hot.connection.isReady && !this.closed) return this.sendHot<T>(hot, args);
    return this.asTenant(tenant, (c) => c.sendCommand<T>(args));
  }

  private sendHot<T>(hot: Hot, args: ReadonlyArray<RedisArgument>): Promise<T> {
    return hot.connection.sendCommand<T>(args).catch((err: unknown) => {
      // As `run`: anything but Redis's own refusal on a live connection forgets it.
      if (!(err instanceof ErrorReply) || !hot.connection.isReady) {
        if (this.tenants.get(hot.tenant) === hot.pending) this.tenants.delete(hot.tenant);
        if (this.hot === hot) this.hot = null;
        void closeQuietly(hot.connection);
      }
      throw this.translate(err);
    });
  }

  private asAdmin<T>(fn: (c: Connection) => Promise<T>): Promise<T> {
    return this.run(
      {
        get: () => {
          if (!this.admin) {
            this.admin = this.connect(this.options.username, this.options.password).then(async (c) => {
              // Loaded by every new admin connection: a Redis restarted from a wiped directory, or
              // running an older library, gets this one before any write needs it.
              await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', FUNCTIONS]);
              return c;
            });
          }
          return this.admin;
        },
        forget: (stale) => {
          if (this.admin === stale) this.admin = null;
        },
      },
      fn,
    );
  }

  private asTenant<T>(tenant: string, fn: (c: Connection) => Promise<T>): Promise<T> {
    return this.run(
      {
        get: () => {
          // Another tenant becomes the most recently used: the hot one would now skip moving to the end.
          if (this.hot !== null && this.hot.tenant !== tenant) this.hot = null;
          this.lastUsed = tenant;
          let connection = this.tenants.get(tenant);
          if (connection) {
            this.tenants.delete(tenant); // most recently used: to the end
          } else {
            this.evictPast(this.options.maxTenantConnections ?? 64);
            connection = this.connect(userOf(tenant), this.tenantPassword(tenant));
          }
          this.tenants.set(tenant, connection);
          return connection;
        },
        forget: (stale) => {
          if (this.tenants.get(tenant) === stale) this.tenants.delete(tenant);
          if (this.hot?.pending === stale) this.hot = null;
        },
        ready: (pending, connection) => {
          // Still the most recently used (nothing else was used while it connected): the next call may skip the look-up.
          if (this.tenants.get(tenant) === pending && this.lastUsed === tenant) this.hot = { tenant, pending, connection };
        },
      },
      fn,
    );
  }

  private evictPast(max: number): void {
    while (this.tenants.size >= Math.max(1, max)) {
      const [oldest, connection] = this.tenants.entries().next().value as [string, Promise<Connection>];
      this.tenants.delete(oldest);
      if (this.hot?.tenant === oldest) this.hot = null;
      // In-flight commands finish first: close() waits for their replies.
      void connection.then(closeQuietly, () => undefined);
    }
  }

  private async forgetTenant(tenant: string): Promise<void> {
    const connection = this.tenants.get(tenant);
    this.tenants.delete(tenant);
    if (this.hot?.tenant === tenant) this.hot = null;
    await connection?.then(closeQuietly, () => undefined);
  }

  /**
   * Runs `fn` on the slot's connection. A cached connection found dead (Redis restarted since) is
   * replaced once before anything is sent. Errors come out as the providers' errors: Redis's own
   * refusals stay refusals, anything else (refused connection, timeout, dropped socket) is an
   * outage, and the broken connection is forgotten so the next call makes a fresh one.
   */
  private async run<T>(slot: Slot, fn: (c: Connection) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      if (this.closed) throw new BackendUnavailableError(BACKEND, 'the kv store is closed');
      const pending = slot.get();
      let c: Connection;
      try {
        c = await pending;
      } catch (err) {
        slot.forget(pending);
        throw this.translate(err);
      }
      if (!c.isReady) {
        slot.forget(pending);
        void closeQuietly(c);
        if (attempt < 2) continue;
        throw new BackendUnavailableError(BACKEND, 'the connection closed');
      }
      slot.ready?.(pending, c);
      try {
        return await fn(c);
      } catch (err) {
        if (!(err instanceof ErrorReply) || !c.isReady) {
          slot.forget(pending);
          void closeQuietly(c);
        }
        throw this.translate(err);
      }
    }
  }

  private translate(err: unknown): Error {
    if (err instanceof ErrorReply) {
      const code = err.message.split(' ')[0];
      if (code === 'OOM') return new BackendRefusedError(BACKEND, 'The key-value store is full; delete entries or try again later.', 'kv_full');
      // The tenant's user is gone: never made (ensureTenant), or dropped with the tenant.
      if (code === 'WRONGPASS') return new BackendGoneError(BACKEND, 'key-value store', 'This key-value store is not on the kv backend any more.');
      // Loading its append-only file, or a script running long: answers in a moment.
      if (code === 'LOADING' || code === 'BUSY' || code === 'MASTERDOWN') return new BackendUnavailableError(BACKEND, code);
      return err;
    }
    return new BackendUnavailableError(BACKEND, err instanceof Error ? err.message : String(err));
  }

  /**
   * A fresh connection: answers come back as Buffers (binary values), commands fail at once while
   * it is down (no offline queue, no reconnecting: the next call makes a new connection), and no
   * CLIENT SETINFO (a tenant user may not run it; it would only fill the ACL log).
   */
  private async connect(username: string, password: string): Promise<Connection> {
    const client = createClient({
      socket: {
        ...(this.options.path ? { path: this.options.path } : { host: this.options.host, port: this.options.port }),
        connectTimeout: this.options.connectTimeoutMs ?? 2_000,
        reconnectStrategy: false,
        // A server that stops answering closes the socket after this long without a byte, failing
        // what waits on it (an idle connection goes too, and is made again at its next use). Not a
        // per-command timeout: node-redis makes an AbortSignal and a timer for each command, a
        // fifth of the data plane's CPU per request.
        socketTimeout: this.options.commandTimeoutMs ?? 5_000,
      },
      username,
      password,
      disableOfflineQueue: true,
      disableClientInfo: true,
      // `timeout: 0`: without it @redis/client still gives every command its DEFAULT_COMMAND_TIMEOUT
      // (5 s): an AbortSignal.timeout per command, whose timer is not cleared by the answer and
      // fires 5 s later, building a DOMException. Leaving `commandTimeoutMs` out was not enough.
      commandOptions: { timeout: 0, typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } },
    });
    // Errors reach the command that meets them; without a listener an 'error' event would crash the process.
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (err) {
      if (client.isOpen) client.destroy();
      throw err;
    }
    return client as unknown as Connection;
  }
}

/** Closes a connection, waiting for its in-flight replies; one already closed (or failing to close) is fine. */
async function closeQuietly(c: Connection): Promise<void> {
  if (!c.isOpen) return;
  try {
    await c.close();
  } catch {
    if (c.isOpen) c.destroy();
  }
}
