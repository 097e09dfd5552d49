import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, lchownSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ensureReachable, freePort, joinHostPort, makeDirectory, requireBinary, requireFile, splitHostPort } from '../local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, lookupAccount, type OsAccount } from '../os-accounts';

/**
 * A local PowerDNS Authoritative server (Debian's pdns-server with the gsqlite3 backend) for the local
 * run and the tests: a data directory with the SQLite database, the configuration and the API key,
 * and `pdns_server` in the foreground as a child process, DNS and HTTP API on loopback ports.
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
  /** Holds pdns.conf, api-key (both 0600), the control socket and `db/pdns.sqlite3`. Created when missing. */
  dataDir: string;
  /** `host:port` where DNS is answered (UDP and TCP); port 0 picks a free one. */
  dnsAddress: string;
  /** `host:port` of the HTTP API; port 0 picks a free one. */
  apiAddress: string;
  binary?: string;
  schemaFile?: string;
  /** Receives the server's output lines (it is quiet below warnings). */
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
  if (!account) return;
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

export class PowerDnsServer {
  private exited: Promise<void>;
  private output: string[] = [];

  private constructor(
    private readonly child: ChildProcess,
    readonly apiUrl: string,
    readonly apiKey: string,
    readonly dnsHost: string,
    readonly dnsPort: number,
    /** The account the server runs as once started; null when it runs as the caller (no root). */
    readonly account: OsAccount | null,
    log?: (line: string) => void,
  ) {
    const collect = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        this.output.push(line);
        if (this.output.length > 50) this.output.shift();
        log?.(line);
      }
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    child.once('error', (err) => collect(Buffer.from(`pdns_server: ${err.message}\n`)));
    this.exited = new Promise((resolve) => {
      child.once('exit', () => resolve());
      // A binary that cannot be started emits 'error' and never 'exit'.
      child.once('error', () => resolve());
    });
  }

  /** `host:port` for node:dns `Resolver.setServers`. */
  get dnsAddress(): string {
    return joinHostPort(this.dnsHost, this.dnsPort);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Prepares the data directory, starts pdns_server and waits until its API answers with the key. */
  static async start(options: PowerDnsServerOptions): Promise<PowerDnsServer> {
    const dataDir = path.resolve(options.dataDir);
    const dbDir = path.join(dataDir, 'db');
    const binary = requireBinary(options.binary ?? PDNS_BINARY, INSTALL);
    const account = await powerDnsAccount(dataDir);
    await makeDirectory(dataDir, 0o700);
    // The server opens its database after dropping to the account: a data directory out of its
    // reach would only show as "unable to open database file". (prepareDataDir opens the data
    // directory itself to the account; the way to it must be open already.)
    if (account) ensureReachable(path.dirname(dataDir), account, { server: 'PowerDNS', setting: 'POWERDNS_DATA_DIR' });
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

    const child = spawn(binary, [`--config-dir=${dataDir}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    const apiUrl = `http://${joinHostPort(api.host, api.port)}`;
    const server = new PowerDnsServer(child, apiUrl, apiKey, dns.host, dns.port, account, options.log);
    await server.waitUntilAnswering(options.startTimeoutMs ?? 20_000);
    return server;
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

  private async waitUntilAnswering(timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    let exited = false;
    void this.exited.then(() => (exited = true));
    while (Date.now() < until) {
      if (exited) break;
      if (await PowerDnsServer.answers(this.apiUrl, this.apiKey, 500)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    await this.stop();
    throw new Error(`PowerDNS did not start (${exited ? 'it exited' : `no answer within ${timeoutMs} ms`}):\n${this.output.slice(-10).join('\n')}`);
  }

  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it to exit. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
    await this.exited;
    clearTimeout(timer);
  }
}
