import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import {
  adoptOrStart,
  ensureReachable,
  freePort,
  joinHostPort,
  makeDirectory,
  openTenantFile,
  daemonEnded,
  processAlive,
  readPidFile,
  requireBinary,
  requireFile,
  spawnDetached,
  splitHostPort,
  stopProcess,
  waitFor,
} from '../local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, lookupAccount, type OsAccount } from '../os-accounts';

/**
 * A local PowerDNS Authoritative server (Debian's pdns-server with the gsqlite3 backend) for the local
 * run and the tests: a data directory with the SQLite database, the configuration and the API key,
 * and `pdns_server` started detached with a pidfile there (the local-server kit's daemon pattern, as
 * HAProxy and the database instances), DNS and HTTP API on loopback ports. A later start from the
 * same directory re-uses the running server; a local run stops it on Ctrl-C (scripts/dev.ts).
 * Production points POWERDNS_API_URL at its own servers instead; nothing here runs there.
 *
 * Started by root, the server binds its ports and then drops to an unprivileged account (Debian's
 * `pdns`, else one of this data directory's own): a bug in it does not hand out root. The account
 * owns only the database's directory (`db/`); the configuration and the API key stay root's, mode
 * 0600, in a directory the account may pass through but not list or change. Without root nothing
 * changes: the server runs as the caller.
 */
export const PDNS_BINARY = '/usr/sbin/pdns_server';
export const PDNS_SQLITE_SCHEMA = '/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql';

const INSTALL = { what: 'PowerDNS (pdns-server)', script: 'scripts/install/powerdns.sh' };
const INSTALL_SQLITE = { what: "PowerDNS's SQLite backend (pdns-backend-sqlite3, sqlite3)", script: 'scripts/install/powerdns.sh' };

/** The account Debian's pdns-server package makes for its own service; the local server drops to it too. */
export const PDNS_ACCOUNT = 'pdns';
/** SQLite's files of the database (WAL mode: the log and the shared-memory index beside it). */
const DB_FILES = ['pdns.sqlite3', 'pdns.sqlite3-wal', 'pdns.sqlite3-shm', 'pdns.sqlite3-journal'];

export interface PowerDnsServerOptions {
  /** Holds pdns.conf, api-key (both 0600), the control socket, pidfile, log and `db/pdns.sqlite3`. Created when missing. */
  dataDir: string;
  /** `host:port` where DNS is answered (UDP and TCP); port 0 picks a free one. */
  dnsAddress: string;
  /** `host:port` of the HTTP API; port 0 picks a free one. */
  apiAddress: string;
  binary?: string;
  schemaFile?: string;
  /** Receives the lines the server wrote to its log (`pdns.log`, quiet below warnings) while this start waited for it. */
  log?: (line: string) => void;
  startTimeoutMs?: number;
}

export { freePort, splitHostPort };

/**
 * The API key of this data directory: generated once (32 random bytes) and kept in `api-key`, mode
 * 0600, so the adapter of every later run (API, worker) reads the same one.
 */
export function ensureApiKey(dataDir: string): string {
  const file = path.join(dataDir, 'api-key');
  if (existsSync(file)) {
    const key = readFileSync(file, 'utf8').trim();
    if (key) return key;
  }
  mkdirSync(dataDir, { recursive: true });
  const key = randomBytes(32).toString('base64url');
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return key;
}

/** Reads the API key a local server's data directory holds (for processes that did not start it). */
export function readApiKey(dataDir: string): string {
  return readFileSync(path.join(dataDir, 'api-key'), 'utf8').trim();
}

/**
 * The account pdns_server drops to after binding: Debian's `pdns` when the machine has it, else one
 * made for this data directory (`cdns-powerdns-<hash>`, so two checkouts' servers get two). Null
 * without root: the server runs as the caller, as it always did.
 */
export async function powerDnsAccount(dataDir: string): Promise<OsAccount | null> {
  if (!isolatedAccounts()) return null;
  return (
    (await lookupAccount(PDNS_ACCOUNT)) ??
    ensureAccount(accountNameFor('dns', path.resolve(dataDir), 'powerdns'), { purpose: 'local PowerDNS', dataDir: path.resolve(dataDir) })
  );
}

/**
 * The data directory's modes: root's, and only passable (0710, its group) for the server's account;
 * `db/` the account's own (0700), where SQLite writes the database and the files beside it.
 * A database an older version kept directly in the data directory is moved into `db/`.
 */
function prepareDataDir(dataDir: string, dbDir: string, account: OsAccount | null): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  mkdirSync(dbDir, { recursive: true, mode: 0o700 });
  if (existsSync(path.join(dataDir, DB_FILES[0])) && !existsSync(path.join(dbDir, DB_FILES[0]))) {
    for (const name of DB_FILES) if (existsSync(path.join(dataDir, name))) renameSync(path.join(dataDir, name), path.join(dbDir, name));
  }
  if (!account) return chmodSync(dataDir, 0o700);
  chownSync(dataDir, 0, account.gid);
  chmodSync(dataDir, 0o710);
  lchownSync(dbDir, account.uid, account.gid);
  chmodSync(dbDir, 0o700);
  // Root may have written the database meanwhile (pdnsutil, an older version): SQLite's files go back
  // to the account. Only those names, only plain files with one link: the directory is the account's,
  // and a link it planted must not make root hand it some other file.
  for (const name of readdirSync(dbDir)) {
    if (!DB_FILES.includes(name)) continue;
    const file = path.join(dbDir, name);
    const info = lstatSync(file);
    if (info.isFile() && info.nlink === 1 && (info.uid !== account.uid || info.gid !== account.gid)) lchownSync(file, account.uid, account.gid);
  }
}

/** Creates the SQLite database from the backend package's schema, once (as the account that will write it). */
function ensureDatabase(dbFile: string, schemaFile: string, account: OsAccount | null): void {
  if (existsSync(dbFile)) return;
  requireFile(schemaFile, INSTALL_SQLITE);
  requireBinary('sqlite3', INSTALL_SQLITE);
  const partial = `${dbFile}.partial`;
  rmSync(partial, { force: true });
  const result = spawnSync('sqlite3', [partial], {
    input: readFileSync(schemaFile),
    stdio: ['pipe', 'ignore', 'pipe'],
    ...(account ? { uid: account.uid, gid: account.gid } : {}),
  });
  if (result.error || result.status !== 0) {
    rmSync(partial, { force: true });
    throw new Error(`creating the PowerDNS database failed: ${result.error?.message ?? result.stderr.toString().trim()}`);
  }
  renameSync(partial, dbFile);
}

function configText(o: {
  dataDir: string;
  dbFile: string;
  dns: string;
  api: { host: string; port: number };
  apiKey: string;
  account: OsAccount | null;
}): string {
  return [
    '# Written by providers/powerdns/powerdns.server.ts on every start; edits are overwritten.',
    'launch=gsqlite3',
    `gsqlite3-database=${o.dbFile}`,
    'gsqlite3-pragma-foreign-keys=yes',
    `local-address=${o.dns}`,
    `socket-dir=${o.dataDir}`,
    // spawnDetached daemonises it (a session of its own): its pid is then known at once, with no fork to chase.
    'daemon=no',
    'guardian=no',
    'disable-syslog=yes',
    'log-timestamp=no',
    'loglevel=4',
    // No security-status lookups to the internet.
    'security-poll-suffix=',
    'distributor-threads=1',
    'receiver-threads=1',
    'api=yes',
    `api-key=${o.apiKey}`,
    'webserver=yes',
    `webserver-address=${o.api.host}`,
    `webserver-port=${o.api.port}`,
    'webserver-allow-from=127.0.0.0/8,::1/128',
    'webserver-loglevel=none',
    // Dropped to after the ports, the control socket and the configuration (with the key) are taken.
    ...(o.account ? [`# account ${o.account.name}`, `setgid=${o.account.gid}`, `setuid=${o.account.uid}`] : []),
    '',
  ].join('\n');
}

/** A start that failed: how the server ended (null: it did not answer in time, and was stopped), and what it wrote meanwhile. */
class PowerDnsStartError extends Error {
  constructor(
    readonly ended: string | null,
    readonly timeoutMs: number,
    readonly output: string[],
  ) {
    super(`PowerDNS did not start (${ended ?? `no answer within ${timeoutMs} ms`}):\n${output.slice(-10).join('\n')}`);
  }

  /** The server could not bind a port ("Unable to bind UDP socket to '127.0.0.1:5300': Address already in use"). */
  get portTaken(): boolean {
    return this.output.some((line) => /Address already in use/.test(line));
  }

  /** It ended without a line of output. */
  get silent(): boolean {
    return this.output.length === 0 && this.ended !== null;
  }
}

/** pdns_server's pidfile in its socket-dir (the data directory): written by this module and by the server itself, as root. */
const PIDFILE = 'pdns.pid';
/** The server's output (warnings and errors), appended to across starts. */
const LOGFILE = 'pdns.log';

/**
 * Recognises pdns_server running this data directory's configuration: a pidfile's pid may belong to
 * another program since (pdnsutil takes the same `--config-dir`, hence the binary's name too).
 */
function serverOf(dataDir: string, binary = PDNS_BINARY): (args: string[]) => boolean {
  const flag = `--config-dir=${dataDir}`;
  const name = path.basename(binary);
  return (args) => path.basename(args[0] ?? '') === name && args.includes(flag);
}

/** What the data directory's pdns.conf (written at the last start, so the running server's) says. */
function configuredSettings(dataDir: string): { dns: { host: string; port: number }; api: { host: string; port: number }; account: OsAccount | null } | null {
  let text: string;
  try {
    text = readFileSync(path.join(dataDir, 'pdns.conf'), 'utf8');
  } catch {
    return null;
  }
  const get = (key: string) => new RegExp(`^${key}=(.*)$`, 'm').exec(text)?.[1]?.trim();
  const [dns, apiHost, apiPort] = [get('local-address'), get('webserver-address'), Number(get('webserver-port'))];
  if (!dns || !apiHost || !Number.isInteger(apiPort)) return null;
  const name = /^# account (\S+)$/m.exec(text)?.[1];
  const [uid, gid] = [Number(get('setuid')), Number(get('setgid'))];
  const account = name && Number.isInteger(uid) && Number.isInteger(gid) ? { name, uid, gid } : null;
  try {
    return { dns: splitHostPort(dns), api: { host: apiHost, port: apiPort }, account };
  } catch {
    return null;
  }
}

/** Whether a server listening on `actual` serves a request for `wanted` (port 0: any port). */
const fits = (wanted: string, actual: { host: string; port: number }) => {
  const w = splitHostPort(wanted);
  return w.host === actual.host && (w.port === 0 || w.port === actual.port);
};

const hostPortOf = (url: string) => {
  const u = new URL(url);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || '80') };
};

/** The end of the server's log from byte `from` on (what one start wrote), at most 64 KiB of it. */
async function logSince(file: string, from: number): Promise<string[]> {
  try {
    const handle = await openTenantFile(file, 'read');
    try {
      const size = (await handle.stat()).size;
      const start = Math.max(from, size - 64 * 1024);
      const buf = Buffer.alloc(Math.max(0, size - start));
      const { bytesRead } = await handle.read(buf, 0, buf.length, start);
      return buf.subarray(0, bytesRead).toString('utf8').split('\n').filter(Boolean);
    } finally {
      await handle.close();
    }
  } catch {
    return [];
  }
}

const fileSize = (file: string) => (existsSync(file) ? statSync(file).size : 0);

/**
 * Stops the PowerDNS of `dataDir` through its pidfile (SIGTERM, SIGKILL after 5 s) and waits until
 * it is gone; nothing running (or a pid that is no longer its server) is fine. For a process that
 * did not start it: a restarted manager, `npm start`'s Ctrl-C, a test's clean-up.
 */
export async function stopPowerDnsServer(dataDir: string): Promise<void> {
  const dir = path.resolve(dataDir);
  const pidfile = path.join(dir, PIDFILE);
  const pid = await readPidFile(pidfile);
  if (pid !== null) await stopProcess(pid, serverOf(dir));
  rmSync(pidfile, { force: true });
}

/**
 * A local pdns_server, daemonised like the other local servers (providers/local-server): in a
 * session of its own, so it outlives the process that started it (and a Ctrl-C sent to that
 * process's group), with a pidfile in its data directory through which any later process finds it
 * again (`find`), re-uses it (`start`) or stops it (`stop`, `stopPowerDnsServer`).
 */
export class PowerDnsServer {
  private constructor(
    readonly dataDir: string,
    /** pdns_server's pid (the same as its pidfile's). */
    readonly pid: number,
    readonly apiUrl: string,
    readonly apiKey: string,
    readonly dnsHost: string,
    readonly dnsPort: number,
    /** The account the server runs as once started; null when it runs as the caller (no root). */
    readonly account: OsAccount | null,
    /** True when this is a server found running (an earlier run's, a crashed manager's) rather than one started now. */
    readonly adopted: boolean,
  ) {}

  /** `host:port` for node:dns `Resolver.setServers`. */
  get dnsAddress(): string {
    return joinHostPort(this.dnsHost, this.dnsPort);
  }

  /** Where the server's output goes (kept across starts). */
  get logFile(): string {
    return path.join(this.dataDir, LOGFILE);
  }

  /**
   * The server of `dataDir` when its pidfile names a live pdns_server of that directory and its API
   * answers with the directory's key; null otherwise. Ports and account are read from its pdns.conf.
   */
  static async find(dataDir: string): Promise<PowerDnsServer | null> {
    const dir = path.resolve(dataDir);
    const pid = await readPidFile(path.join(dir, PIDFILE));
    if (pid === null || !(await processAlive(pid, serverOf(dir)))) return null;
    const settings = configuredSettings(dir);
    if (!settings) return null;
    let apiKey: string;
    try {
      apiKey = readApiKey(dir);
    } catch {
      return null;
    }
    const apiUrl = `http://${joinHostPort(settings.api.host, settings.api.port)}`;
    if (!(await PowerDnsServer.answers(apiUrl, apiKey))) return null;
    return new PowerDnsServer(dir, pid, apiUrl, apiKey, settings.dns.host, settings.dns.port, settings.account, true);
  }

  /**
   * The data directory's server, ready: the one already running when it answers on the addresses
   * asked for (port 0 takes any), its key and ports unchanged; else (none, one not answering, one on
   * other ports, which is stopped) the data directory is prepared, pdns_server started detached, and
   * this waits until its API answers with the key.
   */
  static async start(options: PowerDnsServerOptions): Promise<PowerDnsServer> {
    const dataDir = path.resolve(options.dataDir);
    const binary = requireBinary(options.binary ?? PDNS_BINARY, INSTALL);
    const fitting = (server: PowerDnsServer | null) =>
      server && fits(options.dnsAddress, { host: server.dnsHost, port: server.dnsPort }) && fits(options.apiAddress, hostPortOf(server.apiUrl)) ? server : null;
    // A running server that fits is adopted before anything touches the directory (its modes stay as
    // they are); one on other ports, or not answering, gives way.
    return adoptOrStart({
      dataDir,
      find: async () => fitting(await PowerDnsServer.find(dataDir)),
      prepare: async () => {
        const account = await powerDnsAccount(dataDir);
        if (!existsSync(dataDir)) await makeDirectory(dataDir, 0o700);
        // The server opens its database after dropping to the account: a data directory out of its
        // reach would only show as "unable to open database file". (prepareDataDir opens the data
        // directory itself to the account; the way to it must be open already.)
        if (account) ensureReachable(path.dirname(dataDir), account, { server: 'PowerDNS', setting: 'POWERDNS_DATA_DIR' });
        return account;
      },
      stop: () => stopPowerDnsServer(dataDir),
      launch: async (account) => {
        // Tried again, twice at most: ports chosen free a moment before pdns_server binds them can be
        // taken meanwhile (many servers start at once in a test run), and then other free ones are
        // chosen; and a server that ended before writing a line (a configuration or database it
        // refuses always says so) was not refused (a CI run saw one end so, once, on a loaded machine).
        const choosesPorts = splitHostPort(options.dnsAddress).port === 0 || splitHostPort(options.apiAddress).port === 0;
        for (let attempt = 1; ; attempt++) {
          try {
            return await PowerDnsServer.launch(dataDir, binary, account, options);
          } catch (err) {
            const again = err instanceof PowerDnsStartError && ((choosesPorts && err.portTaken) || err.silent);
            if (!again || attempt >= 3) throw err;
            options.log?.(`PowerDNS start ${attempt} failed, trying again: ${(err as Error).message.split('\n')[0]}`);
          }
        }
      },
    });
  }

  /** Prepares the data directory, writes pdns.conf and the pidfile, starts pdns_server detached and waits for its API. */
  private static async launch(dataDir: string, binary: string, account: OsAccount | null, options: PowerDnsServerOptions): Promise<PowerDnsServer> {
    const dbDir = path.join(dataDir, 'db');
    prepareDataDir(dataDir, dbDir, account);
    const apiKey = ensureApiKey(dataDir);
    const dbFile = path.join(dbDir, 'pdns.sqlite3');
    ensureDatabase(dbFile, options.schemaFile ?? PDNS_SQLITE_SCHEMA, account);

    const dns = splitHostPort(options.dnsAddress);
    if (dns.port === 0) dns.port = await freePort(dns.host, { udp: true });
    const api = splitHostPort(options.apiAddress);
    if (api.port === 0) api.port = await freePort(api.host, { udp: false });

    const confFile = path.join(dataDir, 'pdns.conf');
    writeFileSync(confFile, configText({ dataDir, dbFile, dns: joinHostPort(dns.host, dns.port), api, apiKey, account }), { mode: 0o600 });
    chmodSync(confFile, 0o600);

    const logFile = path.join(dataDir, LOGFILE);
    const from = fileSize(logFile);
    const pid = await spawnDetached(binary, [`--config-dir=${dataDir}`], { cwd: dataDir, outputFile: logFile });
    // Written at once, so that a manager that dies now still leaves the server findable; pdns_server
    // writes the same pid there itself (as root, before dropping to its account).
    writeFileSync(path.join(dataDir, PIDFILE), `${pid}\n`, { mode: 0o644 });
    const server = new PowerDnsServer(dataDir, pid, `http://${joinHostPort(api.host, api.port)}`, apiKey, dns.host, dns.port, account, false);

    const timeoutMs = options.startTimeoutMs ?? 20_000;
    let ended: string | null = null;
    let answered = false;
    // Ends as soon as it answers or exits (a port taken, a bad database): no need to wait the whole timeout for that.
    await waitFor(async () => {
      ended = await daemonEnded(pid, serverOf(dataDir, binary));
      answered = ended === null && (await PowerDnsServer.answers(server.apiUrl, apiKey, 500));
      return ended !== null || answered;
    }, timeoutMs);
    const output = await logSince(logFile, from);
    for (const line of output) options.log?.(line);
    if (answered) return server;
    await server.stop();
    throw new PowerDnsStartError(ended, timeoutMs, output);
  }

  /** True when the API answers this key (for a run that finds a server already up). */
  static async answers(apiUrl: string, apiKey: string, timeoutMs = 1_000): Promise<boolean> {
    try {
      const response = await fetch(`${apiUrl}/api/v1/servers/localhost`, { headers: { 'X-API-Key': apiKey }, signal: AbortSignal.timeout(timeoutMs) });
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Stops the data directory's server (through its pidfile, and this one's pid) and waits until it is gone. */
  async stop(): Promise<void> {
    await stopPowerDnsServer(this.dataDir);
    // Its pidfile may have been replaced meanwhile (another start): this pid goes too, if still this directory's server.
    await stopProcess(this.pid, serverOf(this.dataDir));
  }
}
