import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createClient, ErrorReply, RESP_TYPES } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import { freeLoopbackPort, processAlive, processExists, waitFor } from '../providers/local-server';
import { RedisKvStore, redisTenantCredentials } from '../providers/redis/kv.redis';
import { RedisServer, redisAdminConnection, socketPathOf, stopRedisServer, type RedisAdminConnection } from '../providers/redis/redis.server';
import { describeKvContract } from './kv.contract';

/**
 * The kv primitive on a real redis-server (7.x, the Debian package) started by RedisServer in a
 * temporary directory: the store contract, then what only Redis has: the ACL fence between tenants
 * (attempts a tenant's connection must fail), the server's passwords, adoption by a later start,
 * durability across a restart, memory exhaustion and outages.
 */
const root = mkdtempSync(path.join(tmpdir(), 'redis-kv-test-'));
const dataDir = path.join(root, 'redis');
let server: RedisServer;
let admin: RedisAdminConnection;
let store: RedisKvStore;
const pids = new Set<number>();
const clients: RawClient[] = [];

beforeAll(async () => {
  server = await RedisServer.start({ dataDir, maxmemoryBytes: 64 * 1024 * 1024 });
  pids.add(server.pid);
  admin = server.adminConnection();
  store = new RedisKvStore(admin);
});

afterAll(async () => {
  await Promise.all(clients.map((c) => (c.isOpen ? c.close().catch(() => undefined) : undefined)));
  await store?.close();
  await stopRedisServer(dataDir);
  for (const pid of pids) await waitFor(async () => !(await processAlive(pid, 'redis-server')), 10_000, 20);
  rmSync(root, { recursive: true, force: true });
});

describeKvContract('redis', () => store);

/** A raw node-redis client, as whoever holds these credentials could open one. */
function rawClient(credentials: { username?: string; password?: string }) {
  return createClient({
    socket: { host: server.host, port: server.port, reconnectStrategy: false },
    ...credentials,
    disableClientInfo: true,
    commandOptions: { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } },
  });
}
type RawClient = ReturnType<typeof rawClient>;

/** A raw connection, closed after the file. */
async function connectAs(credentials: { username?: string; password?: string }): Promise<RawClient> {
  const client = rawClient(credentials);
  client.on('error', () => undefined);
  clients.push(client);
  await client.connect();
  return client;
}

/** The error a command met (it must fail). */
async function refusal(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('the command was not refused');
}

const b = (text: string) => Buffer.from(text);

describe('redis: the ACL fence between tenants', () => {
  let alice: string;
  let bob: string;
  let asAlice: RawClient;

  beforeAll(async () => {
    [alice, bob] = ['alice1', 'bob1'];
    await store.ensureTenant(alice);
    await store.ensureTenant(bob);
    await store.put(bob, 'app', b('secret'), b("bob's secret"));
    await store.put(alice, 'app', b('mine'), b('of alice'));
    asAlice = await connectAs(redisTenantCredentials(admin.password, alice));
  });

  it("lets alice's user read her own keys", async () => {
    expect(await asAlice.sendCommand(['GET', 'kv:alice1:app:mine'])).toEqual(b('of alice'));
  });

  it("refuses alice's user every key of bob: GET, SET, DEL, and the metering functions with bob's keys", async () => {
    const attempts: string[][] = [
      ['GET', 'kv:bob1:app:secret'],
      ['SET', 'kv:bob1:app:secret', 'overwritten'],
      ['DEL', 'kv:bob1:app:secret'],
      ['EXISTS', 'kv:bob1:app:secret'],
      ['STRLEN', 'kv:bob1:app:secret'],
      ['INCRBY', 'kv:bob1::bytes', '-1000'],
      ['FCALL', 'kv_put', '2', 'kv:bob1:app:secret', 'kv:bob1::bytes', 'overwritten'],
      ['FCALL', 'kv_del', '2', 'kv:bob1:app:secret', 'kv:bob1::bytes'],
      // Her own entry with bob's counter (moves his bill), and the other way round.
      ['FCALL', 'kv_put', '2', 'kv:alice1:app:x', 'kv:bob1::bytes', 'v'],
      ['FCALL', 'kv_put', '2', 'kv:bob1:app:x', 'kv:alice1::bytes', 'v'],
      // A key that is not any tenant's.
      ['GET', 'kv:alice1'],
      ['SET', 'something-else', 'v'],
    ];
    for (const command of attempts) {
      const err = await refusal(asAlice.sendCommand(command));
      expect(err, command.join(' ')).toBeInstanceOf(ErrorReply);
      expect(err.message, command.join(' ')).toMatch(/^NOPERM/);
    }
    expect(await store.get(bob, 'app', b('secret'))).toEqual(b("bob's secret"));
    expect(await store.storedBytes(bob)).toBe('app'.length + 1 + 'secret'.length + "bob's secret".length);
  });

  it("refuses alice's user the commands that list, read or change the whole server", async () => {
    const attempts: string[][] = [
      ['SCAN', '0'],
      ['SCAN', '0', 'MATCH', 'kv:bob1:*'],
      ['KEYS', '*'],
      ['RANDOMKEY'],
      ['DBSIZE'],
      ['CONFIG', 'GET', '*'],
      ['CONFIG', 'SET', 'maxmemory', '0'],
      ['FLUSHALL'],
      ['FLUSHDB'],
      ['EVAL', "return redis.call('GET', 'kv:bob1:app:secret')", '0'],
      ['EVAL', "return redis.call('KEYS', '*')", '0'],
      ['FUNCTION', 'LOAD', 'REPLACE', "#!lua name=cloudkv\nredis.register_function('kv_put', function() return 0 end)"],
      ['FUNCTION', 'FLUSH'],
      ['MEMORY', 'USAGE', 'kv:bob1:app:secret'],
      ['MEMORY', 'STATS'],
      ['ACL', 'SETUSER', 'kv-alice1', '~*'],
      ['ACL', 'LIST'],
      ['ACL', 'GETUSER', 'kv-bob1'],
      ['CLIENT', 'LIST'],
      ['CLIENT', 'KILL', 'USER', 'kv-bob1'],
      ['INFO'],
      ['MONITOR'],
      ['SUBSCRIBE', '__keyspace@0__:*'],
      ['SELECT', '1'],
      ['SWAPDB', '0', '1'],
      ['SHUTDOWN', 'NOSAVE'],
    ];
    for (const command of attempts) {
      const err = await refusal(asAlice.sendCommand(command));
      expect(err.message, command.join(' ')).toMatch(/^NOPERM/);
    }
    // DEBUG is off for everyone (enable-debug-command no), before the ACL is even asked.
    expect((await refusal(asAlice.sendCommand(['DEBUG', 'OBJECT', 'kv:alice1:app:mine']))).message).toMatch(/^(NOPERM|ERR DEBUG command not allowed)/);
  });

  it("cannot log in as bob with alice's password, nor with none", async () => {
    const err = await refusal(connectAs({ username: 'kv-bob1', password: redisTenantCredentials(admin.password, alice).password }));
    expect(err.message).toMatch(/WRONGPASS/);
    const anonymous = await refusal(connectAs({}));
    expect(anonymous.message).toMatch(/NOAUTH/);
  });

  it('keeps the default user off, whatever its password', async () => {
    for (const password of ['x', 'nopass', admin.password]) {
      const err = await refusal(connectAs({ username: 'default', password }));
      expect(err.message).toMatch(/WRONGPASS/);
    }
  });

  it('keeps a dropped tenant out: its user is gone, its old connection too', async () => {
    const doomed = 'doomed1';
    await store.ensureTenant(doomed);
    await store.put(doomed, 'app', b('k'), b('v'));
    const open = await connectAs(redisTenantCredentials(admin.password, doomed));
    await store.dropTenant(doomed);
    expect(await refusal(open.sendCommand(['GET', 'kv:doomed1:app:k']))).not.toBeInstanceOf(ErrorReply); // disconnected
    const again = await refusal(connectAs(redisTenantCredentials(admin.password, doomed)));
    expect(again.message).toMatch(/WRONGPASS/);
    await expect(store.get(doomed, 'app', b('k'))).rejects.toBeInstanceOf(BackendGoneError);
  });

  it('answers BackendGoneError for a tenant never made', async () => {
    await expect(store.put('nevermade', 'app', b('k'), b('v'))).rejects.toBeInstanceOf(BackendGoneError);
  });
});

describe('redis: the server', () => {
  it('keeps its secrets out of reach: 0700 directory, 0600 secret, no password in the config, the ACL file or the command line', async () => {
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(dataDir, 'admin.secret')).mode & 0o777).toBe(0o600);
    expect(statSync(path.join(dataDir, 'redis.conf')).mode & 0o777).toBe(0o600);
    const config = readFileSync(path.join(dataDir, 'redis.conf'), 'utf8');
    expect(config).toMatch(/^bind 127\.0\.0\.1$/m);
    expect(config).toMatch(/^appendonly yes$/m);
    expect(config).toMatch(/^maxmemory-policy noeviction$/m);
    const tenantPassword = redisTenantCredentials(admin.password, 'alice1').password;
    for (const file of ['redis.conf', 'users.acl', 'redis.log', 'server.json']) {
      const text = readFileSync(path.join(dataDir, file), 'utf8');
      expect(text, file).not.toContain(admin.password);
      expect(text, file).not.toContain(tenantPassword);
    }
    const cmdline = readFileSync(`/proc/${server.pid}/cmdline`, 'utf8');
    expect(cmdline).not.toContain(admin.password);
    expect(redisAdminConnection(dataDir)).toEqual(admin);
  });

  it('is adopted by a second start on the same data directory', async () => {
    const again = await RedisServer.start({ dataDir, maxmemoryBytes: 32 * 1024 * 1024 });
    expect(again.pid).toBe(server.pid);
    expect(again.adopted).toBe(true);
    expect(again.port).toBe(server.port);
    expect((await RedisServer.find(dataDir))?.pid).toBe(server.pid);
  });

  it('refuses writes when full but still deletes (noeviction: never a tenant evicted)', async () => {
    const t = 'fulltenant1';
    await store.ensureTenant(t);
    await store.put(t, 'app', b('k'), b('v'));
    const asAdmin = await connectAs({ username: admin.username, password: admin.password });
    await asAdmin.sendCommand(['CONFIG', 'SET', 'maxmemory', '1']);
    try {
      const err = await refusal(store.put(t, 'app', b('k2'), b('v')));
      expect(err).toBeInstanceOf(BackendRefusedError);
      expect((err as BackendRefusedError).code).toBe('kv_full');
      expect(await store.get(t, 'app', b('k'))).toEqual(b('v'));
      expect(await store.delete(t, 'app', b('k'))).toBe(0);
    } finally {
      await asAdmin.sendCommand(['CONFIG', 'SET', 'maxmemory', String(64 * 1024 * 1024)]);
    }
    expect(await store.put(t, 'app', b('k2'), b('v'))).toBe('app'.length + 1 + 2 + 1);
  });

  it('loads the metering functions again when Redis lost them', async () => {
    const t = 'reload1';
    await store.ensureTenant(t);
    const asAdmin = await connectAs({ username: admin.username, password: admin.password });
    await asAdmin.sendCommand(['FUNCTION', 'FLUSH']);
    expect(await store.put(t, 'app', b('k'), b('v'))).toBe(6);
  });

  it('keeps at most maxTenantConnections tenant connections open', async () => {
    const small = new RedisKvStore({ ...admin, maxTenantConnections: 2 });
    try {
      const tenants = ['lru1', 'lru2', 'lru3', 'lru4', 'lru5'];
      for (const t of tenants) await store.ensureTenant(t);
      for (const t of [...tenants, ...tenants]) expect(await small.put(t, 'app', b('k'), b('v'))).toBe(6);
      const asAdmin = await connectAs({ username: admin.username, password: admin.password });
      await waitFor(async () => {
        const list = ((await asAdmin.sendCommand(['CLIENT', 'LIST'])) as Buffer).toString();
        return (list.match(/ user=kv-lru\d /g) ?? []).length <= 2;
      }, 5_000);
      const list = ((await asAdmin.sendCommand(['CLIENT', 'LIST'])) as Buffer).toString();
      expect((list.match(/ user=kv-lru\d /g) ?? []).length).toBeLessThanOrEqual(2);
    } finally {
      await small.close();
    }
  });

  it('answers BackendUnavailableError when nothing listens, on TCP or at a socket path', async () => {
    for (const options of [
      { ...admin, path: undefined, port: await freeLoopbackPort() },
      { ...admin, path: path.join(root, 'no-such.sock') },
    ]) {
      const nowhere = new RedisKvStore(options);
      try {
        await expect(nowhere.get('t1', 'app', b('k'))).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(nowhere.ensureTenant('t1')).rejects.toBeInstanceOf(BackendUnavailableError);
      } finally {
        await nowhere.close();
      }
    }
  });

  it("is reached through its Unix socket (its user's alone), and over TCP all the same", async () => {
    // The store above (every test of this file) goes through the socket: the admin connection names it.
    expect(admin.path).toBe(path.join(dataDir, 'redis.sock'));
    const socket = statSync(admin.path!);
    expect(socket.isSocket()).toBe(true);
    expect(socket.mode & 0o777).toBe(0o700);
    expect(socket.uid).toBe(process.getuid!());
    expect(readFileSync(path.join(dataDir, 'redis.conf'), 'utf8')).toMatch(/^unixsocketperm 700$/m);
    const overTcp = new RedisKvStore({ ...admin, path: undefined });
    try {
      await store.ensureTenant('tcp1');
      expect(await overTcp.put('tcp1', 'app', b('k'), b('v'))).toBe(6);
      expect(await store.get('tcp1', 'app', b('k'))).toEqual(b('v'));
    } finally {
      await overTcp.close();
    }
  });

  it('listens on TCP only where a socket path would be too long for a socket address', async () => {
    expect(socketPathOf('/srv/' + 'd'.repeat(100))).toBeNull();
    const deep = path.join(root, 'x'.repeat(100 - root.length));
    expect(socketPathOf(deep)).toBeNull();
    const other = await RedisServer.start({ dataDir: deep, maxmemoryBytes: 16 * 1024 * 1024 });
    pids.add(other.pid);
    try {
      const connection = other.adminConnection();
      expect(connection.path).toBeUndefined();
      expect(readFileSync(path.join(deep, 'redis.conf'), 'utf8')).not.toMatch(/unixsocket/);
      const tcpOnly = new RedisKvStore(connection);
      try {
        await tcpOnly.ensureTenant('deep1');
        expect(await tcpOnly.put('deep1', 'app', b('k'), b('v'))).toBe(6);
      } finally {
        await tcpOnly.close();
      }
    } finally {
      await stopRedisServer(deep);
    }
  });

  it('keeps data, counters and tenant users across a stop and a start; stopped, no process is left', async () => {
    const t = 'durable1';
    await store.ensureTenant(t);
    expect(await store.put(t, 'app', b('k'), Buffer.from([0, 1, 2]))).toBe(8);
    const before = server.pid;
    const started = Date.now();
    await server.stop();
    const stopMs = Date.now() - started;
    expect(await processAlive(before, 'redis-server')).toBe(false);
    expect(await waitFor(async () => !processExists(before), 5_000, 20)).toBe(true);
    expect(await RedisServer.find(dataDir)).toBeNull();
    await expect(store.get(t, 'app', b('k'))).rejects.toBeInstanceOf(BackendUnavailableError);

    const restarted = Date.now();
    server = await RedisServer.start({ dataDir, maxmemoryBytes: 64 * 1024 * 1024 });
    pids.add(server.pid);
    const startMs = Date.now() - restarted;
    expect(server.pid).not.toBe(before);
    expect(server.adopted).toBe(false);
    expect(server.adminConnection()).toEqual(admin);
    // The same store carries on: its dead connections are replaced.
    expect(await store.get(t, 'app', b('k'))).toEqual(Buffer.from([0, 1, 2]));
    expect(await store.storedBytes(t)).toBe(8);
    expect(await store.get('bob1', 'app', b('secret'))).toEqual(b("bob's secret"));
    // The tenant users came back from users.acl, the fence with them.
    const asAlice = await connectAs(redisTenantCredentials(admin.password, 'alice1'));
    expect(await asAlice.sendCommand(['GET', 'kv:alice1:app:mine'])).toEqual(b('of alice'));
    expect((await refusal(asAlice.sendCommand(['GET', 'kv:bob1:app:secret']))).message).toMatch(/^NOPERM/);
    // Redis 7.0 drops a replayed transaction it finds not allowed, saying so only in its log.
    expect(readFileSync(server.logFile, 'utf8')).not.toContain('CRITICAL');
    console.log(`redis stop ${stopMs} ms, start ${startMs} ms`);
  });

  it('keeps writes older than a second across a crash (SIGKILL): append-only, fsynced every second', async () => {
    const t = 'crash1';
    await store.ensureTenant(t);
    await store.put(t, 'app', b('k'), b('survives'));
    await store.put(t, 'app', b('gone'), b('then deleted'));
    await store.delete(t, 'app', b('gone'));
    await new Promise((r) => setTimeout(r, 1_500));
    const before = server.pid;
    process.kill(before, 'SIGKILL');
    expect(await waitFor(async () => !(await processAlive(before, 'redis-server')), 5_000, 20)).toBe(true);
    server = await RedisServer.start({ dataDir, maxmemoryBytes: 64 * 1024 * 1024 });
    pids.add(server.pid);
    expect(await store.get(t, 'app', b('k'))).toEqual(b('survives'));
    expect(await store.get(t, 'app', b('gone'))).toBeNull();
    expect(await store.storedBytes(t)).toBe('app'.length + 1 + 1 + 'survives'.length);
    expect(readFileSync(server.logFile, 'utf8')).not.toContain('CRITICAL');
  });
});
