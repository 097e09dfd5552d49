import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {
  adoptOrStart,
  awaitDaemonReady,
  findBinary,
  freeLoopbackPort,
  joinHostPort,
  liveDaemon,
  makeDirectory,
  probeBind,
  readJsonFile,
  readPidFile,
  spawnDetached,
  stopProcess,
  LocalServerError,
} from '../local-server';

/**
 * The host's Redis 7 (`redis-server <dataDir>/redis.conf`), the kv primitive's store: one per host
 * data directory serves every kv tenant placed there; tenants are kept apart by key prefixes and one
 * ACL user each (providers/redis/kv.redis.ts), not by processes.
 *
 * Daemonised like the other local servers (providers/local-server): a session of its own, a pidfile
 * in its data directory through which any later process finds it again (`find`), re-uses it
 * (`start`) or stops it (`stopRedisServer`). The port is chosen once, at the first start, and kept
 * in `server.json`. Everything Redis reads or writes is in the data directory (mode 0700): its
 * configuration (rewritten at every start), its append-only file, its ACL file, its log.
 *
 * Nobody reaches it without a password: the `default` user is off, and the control plane's `admin`
 * user's secret is generated once (crypto random) into `admin.secret` (0600). The secret goes to
 * Redis only as its SHA-256 (`#<hash>` in users.acl) and to clients over the socket: never on a
 * command line, in the configuration or in a log. Durability: append-only file, fsynced every second,
 * no RDB snapshots; the ACL file holds the tenants' users (kept by `ACL SAVE`).
 *
 * It runs as the invoking user, like Haraka: one shared server that runs no tenant code (no EVAL,
 * no modules, no DEBUG for anyone), reached only by the data plane: over its Unix socket on this
 * machine (`socketPathOf`), or loopback TCP.
 */
const INSTALL_FIX = 'run bash scripts/install/serverless.sh (as root): it installs the Debian package redis-server (Redis 7)';
const PIDFILE = 'redis.pid';
const LOGFILE = 'redis.log';
const CONFIG = 'redis.conf';
const SETTINGS = 'server.json';
const ACLFILE = 'users.acl';
const SECRET = 'admin.secret';
const SOCKET = 'redis.sock';
/** The control plane's user: every key, every command. Tenants' users are made by the kv store. */
export const REDIS_ADMIN_USER = 'admin';
/** SIGTERM makes Redis fsync its append-only file and exit; SIGKILL only if that takes longer than this. */
const STOP_GRACE_MS = 15_000;
const DEFAULT_MAXMEMORY = 256 * 1024 * 1024;

/** What a server keeps in `server.json`: where it listens, fixed at its first start. */
export interface RedisSettings {
  bindAddress: string;
  port: number;
}

export interface RedisServerOptions {
  dataDir: string;
  /** The port asked for at the first start (0 or unset: any free one); later starts keep the stored one. */
  port?: number;
  /** Redis's `maxmemory` in bytes (default 256 MiB); past it writes are refused (`noeviction`), never a tenant's data evicted. Applied at every start. */
  maxmemoryBytes?: number;
  /** The redis-server binary (default: found on PATH or in /usr/bin). */
  binary?: string;
  startTimeoutMs?: number;
}

/** How a client logs in as the admin user: for the kv store (RedisKvStore's options) or an operator's redis-cli. */
export interface RedisAdminConnection {
  host: string;
  port: number;
  /**
   * The server's Unix socket, when it has one: the kv data plane on the same machine talks to Redis
   * through it (no TCP stack per command: docs/benchmarks.md "Serverless primitives"); `host:port`
   * stays for everything else (redis-cli, a plane on another machine).
   */
  path?: string;
  username: string;
  password: string;
}

export function redisBinary(configured?: string): string {
  const found = findBinary(...(configured ? [configured] : ['redis-server', '/usr/bin/redis-server']));
  if (!found) throw new LocalServerError(`${configured ?? 'redis-server'} is missing: Redis is not installed`, INSTALL_FIX);
  return found;
}

const serverOf =
  (dataDir: string) =>
  (args: string[]): boolean =>
    args.some((a) => path.basename(a) === 'redis-server') && args.includes(path.join(dataDir, CONFIG));

function readSettings(dataDir: string): RedisSettings | null {
  return readJsonFile<RedisSettings>(path.join(dataDir, SETTINGS));
}

/** The admin secret of a data directory (null before its first start). */
function readSecret(dataDir: string): string | null {
  try {
    const secret = readFileSync(path.join(dataDir, SECRET), 'utf8').trim();
    return secret === '' ? null : secret;
  } catch {
    return null;
  }
}

/** The admin secret, made at the first start and kept: tenants' passwords are derived from it (kv.redis.ts), so it must not change. */
function ensureSecret(dataDir: string): string {
  const existing = readSecret(dataDir);
  const file = path.join(dataDir, SECRET);
  if (existing) {
    chmodSync(file, 0o600);
    return existing;
  }
  writeFileSync(`${file}.partial`, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600 });
  renameSync(`${file}.partial`, file);
  return readSecret(dataDir)!;
}

/**
 * The admin connection of a data directory's server, running or not (null before its first start):
 * what RedisKvStore needs, read from `server.json` and `admin.secret`.
 */
export function redisAdminConnection(dataDir: string): RedisAdminConnection | null {
  const dir = path.resolve(dataDir);
  const settings = readSettings(dir);
  const password = readSecret(dir);
  if (!settings || !password) return null;
  // A server started before it had the socket (adopted as it runs) has none: then TCP only.
  const socket = socketPathOf(dir);
  return { host: settings.bindAddress, port: settings.port, ...(socket && existsSync(socket) ? { path: socket } : {}), username: REDIS_ADMIN_USER, password };
}

/**
 * The Unix socket of a data directory's server (`redis.sock` in it, mode 0700: the server's own
 * user only, as the data directory), or null when its path is too long for a socket address
 * (sun_path: 108 bytes with its NUL; a checkout deep in a home directory), when the server listens on TCP only.
 */
export function socketPathOf(dataDir: string): string | null {
  const socket = path.join(path.resolve(dataDir), SOCKET);
  return Buffer.byteLength(socket) <= 100 ? socket : null;
}

async function chooseSettings(options: RedisServerOptions): Promise<RedisSettings> {
  const bindAddress = '127.0.0.1';
  const asked = options.port ?? 0;
  if (asked !== 0 && (await probeBind(bindAddress, asked)) !== 'free') {
    throw new LocalServerError(`the Redis port ${joinHostPort(bindAddress, asked)} is taken`, 'choose a free port, or leave it unset to pick one');
  }
  return { bindAddress, port: asked || (await freeLoopbackPort(bindAddress)) };
}

/** redis.conf: a string value quoted the way Redis's config parser reads it. */
const quoted = (value: string) => `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

function configText(dataDir: string, settings: RedisSettings, maxmemoryBytes: number): string {
  const socket = socketPathOf(dataDir);
  return [
    '# Written by providers/redis/redis.server.ts on every start; edits are overwritten.',
    `bind ${settings.bindAddress}`,
    `port ${settings.port}`,
    ...(socket ? [`unixsocket ${quoted(socket)}`, 'unixsocketperm 700'] : []),
    'protected-mode yes',
    'daemonize no',
    // The command line stays `redis-server <config>`: how a later process recognises its pid.
    'set-proc-title no',
    // Logs go to standard output, which spawnDetached sends to redis.log.
    'logfile ""',
    `dir ${quoted(dataDir)}`,
    'save ""',
    'appendonly yes',
    'appendfsync everysec',
    `maxmemory ${maxmemoryBytes}`,
    'maxmemory-policy noeviction',
    `aclfile ${quoted(path.join(dataDir, ACLFILE))}`,
    'enable-debug-command no',
    'enable-module-command no',
    'enable-protected-configs no',
    '',
  ].join('\n');
}

/**
 * users.acl as Redis will read it: `default` off and `admin` with the current secret's hash (both
 * rewritten every start, so a hand edit cannot open them), every other user (the tenants', written
 * by `ACL SAVE`) kept as it is.
 *
 * `default` is off (no login, and every connection must log in first) but keeps every command and
 * key: Redis 7.0 re-checks each command of a MULTI/EXEC replayed from the append-only file against
 * `default`'s rights (redis/redis#14541), and the metering functions' writes are logged as such
 * transactions. With `-@all` they were silently dropped at the next start (measured here: every
 * put lost after a restart). Being off, the rights serve no client.
 */
function aclText(dataDir: string, secret: string): string {
  let kept: string[] = [];
  try {
    kept = readFileSync(path.join(dataDir, ACLFILE), 'utf8')
      .split('\n')
      .filter((line) => {
        const name = /^user (\S+)/.exec(line)?.[1];
        return name !== undefined && name !== 'default' && name !== REDIS_ADMIN_USER;
      });
  } catch {
    // first start
  }
  const hash = createHash('sha256').update(secret).digest('hex');
  return ['user default off resetpass ~* &* +@all', `user ${REDIS_ADMIN_USER} on #${hash} ~* &* +@all`, ...kept, ''].join('\n');
}

function writePrivate(file: string, content: string): void {
  writeFileSync(`${file}.partial`, content, { mode: 0o600 });
  chmodSync(`${file}.partial`, 0o600);
  renameSync(`${file}.partial`, file);
}

/** A running Redis of one data directory. */
export class RedisServer {
  private constructor(
    readonly dataDir: string,
    readonly pid: number,
    readonly settings: RedisSettings,
    /** Found running (started by another process or an earlier call), not started by this call. */
    readonly adopted: boolean,
  ) {}

  get host(): string {
    return this.settings.bindAddress;
  }

  get port(): number {
    return this.settings.port;
  }

  get logFile(): string {
    return path.join(this.dataDir, LOGFILE);
  }

  /** How the control plane logs in (the kv store's options). */
  adminConnection(): RedisAdminConnection {
    return redisAdminConnection(this.dataDir)!;
  }

  /** The settings a data directory holds, running or not (null before its first start). */
  static settingsOf(dataDir: string): RedisSettings | null {
    return readSettings(path.resolve(dataDir));
  }

  /** The data directory's server when its pidfile names a live redis-server of it that answers the admin user. */
  static async find(dataDir: string): Promise<RedisServer | null> {
    const dir = path.resolve(dataDir);
    const live = await liveDaemon<RedisSettings>(dir, { pidfile: PIDFILE, settingsFile: SETTINGS }, serverOf(dir));
    if (!live) return null;
    const server = new RedisServer(dir, live.pid, live.settings, true);
    return (await server.answers()) ? server : null;
  }

  /**
   * The data directory's server, ready: the running one (as it was started: its options are not
   * applied again), else started (once, under a lock shared by every process of the host).
   */
  static async start(options: RedisServerOptions): Promise<RedisServer> {
    const dataDir = path.resolve(options.dataDir);
    return adoptOrStart({
      dataDir,
      find: () => RedisServer.find(dataDir),
      prepare: async () => {
        const binary = redisBinary(options.binary);
        const maxmemory = options.maxmemoryBytes ?? DEFAULT_MAXMEMORY;
        if (!Number.isSafeInteger(maxmemory) || maxmemory < 1024 * 1024) {
          throw new LocalServerError(`maxmemory ${maxmemory} is not a number of bytes of at least 1 MiB`, 'give maxmemoryBytes as a whole number of bytes');
        }
        if (!existsSync(dataDir)) await makeDirectory(dataDir, 0o700);
        chmodSync(dataDir, 0o700);
        return { binary, maxmemory };
      },
      stop: () => stopRedisServer(dataDir),
      launch: ({ binary, maxmemory }) => RedisServer.launch(dataDir, binary, maxmemory, options),
    });
  }

  private static async launch(dataDir: string, binary: string, maxmemory: number, options: RedisServerOptions): Promise<RedisServer> {
    let settings = readSettings(dataDir);
    if (!settings) {
      settings = await chooseSettings(options);
      writePrivate(path.join(dataDir, SETTINGS), JSON.stringify(settings, null, 2));
    }
    const secret = ensureSecret(dataDir);
    writePrivate(path.join(dataDir, ACLFILE), aclText(dataDir, secret));
    const config = path.join(dataDir, CONFIG);
    writePrivate(config, configText(dataDir, settings, maxmemory));
    const logFile = path.join(dataDir, LOGFILE);
    const pid = await spawnDetached(binary, [config], {
      cwd: dataDir,
      outputFile: logFile,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    writeFileSync(path.join(dataDir, PIDFILE), `${pid}\n`, { mode: 0o600 });
    const server = new RedisServer(dataDir, pid, settings, false);
    await awaitDaemonReady({
      what: 'Redis',
      pid,
      isOurs: serverOf(dataDir),
      answers: () => server.answers(),
      timeoutMs: options.startTimeoutMs,
      intervalMs: 25,
      logFile,
      stop: () => server.stop(),
    });
    return server;
  }

  /**
   * True when the admin user logs in and PING answers PONG: a Redis still loading its append-only
   * file answers LOADING, and one of another data directory refuses the password.
   */
  answers(timeoutMs = 1_000): Promise<boolean> {
    const secret = readSecret(this.dataDir);
    if (!secret) return Promise.resolve(false);
    return new Promise((resolve) => {
      const socket = net.connect({ host: this.host, port: this.port });
      let received = '';
      let settled = false;
      const done = (ok: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      socket.setEncoding('latin1');
      socket.once('connect', () => socket.write(resp(['AUTH', REDIS_ADMIN_USER, secret]) + resp(['PING'])));
      socket.on('data', (chunk: string) => {
        received += chunk;
        const lines = received.split('\r\n');
        if (lines.length >= 3) done(lines[0] === '+OK' && lines[1] === '+PONG');
        else if (lines[0].startsWith('-')) done(false);
      });
      socket.once('error', () => done(false));
      socket.once('close', () => done(false));
    });
  }

  async stop(): Promise<void> {
    await stopRedisServer(this.dataDir);
    await stopProcess(this.pid, serverOf(this.dataDir), STOP_GRACE_MS);
  }
}

/** One command in RESP (arrays of bulk strings). */
function resp(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/** Stops the Redis of `dataDir` through its pidfile (SIGTERM: it fsyncs its append-only file; SIGKILL after a grace period); nothing running is fine. */
export async function stopRedisServer(dataDir: string): Promise<void> {
  const dir = path.resolve(dataDir);
  const pidfile = path.join(dir, PIDFILE);
  const pid = await readPidFile(pidfile);
  if (pid !== null) await stopProcess(pid, serverOf(dir), STOP_GRACE_MS);
  rmSync(pidfile, { force: true });
}
