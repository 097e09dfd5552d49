import { copyFileSync, chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  adoptOrStart,
  awaitDaemonReady,
  freeLoopbackPort,
  joinHostPort,
  makeDirectory,
  probeBind,
  processAlive,
  readPidFile,
  spawnDetached,
  stopProcess,
  waitFor,
  LocalServerError,
  liveDaemon,
  readJsonFile,
} from '../local-server';
import { FORCE_SHUTDOWN_S, parseSmarthost, renderHarakaConfig, type HarakaLogLevel } from './config';

/**
 * The platform's MTA: one Haraka 3.3.4 per host (`node --import tsx launcher.js -c <dataDir>`),
 * the mail gateway's submission server and outbound queue. Clients on this host submit with AUTH
 * on its submission port (the `/emails` data plane with the platform's credential, or a customer's
 * SMTP credential); it DKIM-signs and delivers to the recipients' MX or a smarthost. Every decision
 * (who may log in, send as whom, which key signs, what a delivery outcome records) is asked of the
 * hooks module (providers/haraka/hooks.ts) by our plugin (plugin/cloud_mail.js).
 *
 * Daemonised like the other local servers (providers/local-server): a session of its own, a pidfile
 * in its data directory through which any later process finds it again (`find`), re-uses it
 * (`start`) or stops it (`stopHarakaServer`). The submission port is chosen once, at the first
 * start, and kept in `server.json`: clients are configured with it. Everything Haraka writes stays
 * in the data directory (mode 0700): its configuration (rewritten at every start), its queue, its
 * log.
 *
 * It runs as the invoking user, not as an account of its own (unlike the database instances or the
 * load balancers): it is one shared server that runs no tenant code, only our plugin, and tenants
 * reach it only through SMTP. The hooks' secrets (database URL, master key) go to it through its
 * environment (`env`), never to a file or a log.
 */
const PIDFILE = 'haraka.pid';
const LOGFILE = 'haraka.log';
const SETTINGS = 'server.json';
/** Written by the plugin once its hooks are created (hook_init_master): the server takes mail. */
const READY = 'ready';
/**
 * SIGTERM, then SIGKILL after this: Haraka's graceful stop ends by itself after
 * force_shutdown_timeout (open client connections, deliveries in flight), and its queue files are
 * crash-safe (written to a temporary name, fsynced, renamed).
 */
const STOP_GRACE_MS = (FORCE_SHUTDOWN_S + 3) * 1_000;

const LAUNCHER = path.join(__dirname, 'launcher.js');
const PLUGIN = path.join(__dirname, 'plugin', 'cloud_mail.js');
/**
 * Variables of this process the MTA gets besides `env`; nothing else (the API's own secrets stay
 * here, and NODE_ENV only when `env` has it).
 */
const PASSED_ENV = ['PATH', 'HOME', 'TMPDIR', 'TZ', 'LANG', 'NODE_COMPILE_CACHE'];

/** What a server keeps in `server.json`: where it listens, fixed at its first start. */
export interface HarakaSettings {
  bindAddress: string;
  /** The submission port (SMTP with AUTH PLAIN/LOGIN, offered to clients on this host only). */
  port: number;
}

export interface HarakaServerOptions {
  dataDir: string;
  /** Default 127.0.0.1. Fixed at the first start (kept in server.json). */
  bindAddress?: string;
  /** The submission port asked for at the first start (0 or unset: any free one); later starts keep the stored one. */
  port?: number;
  /** Absolute path of the module exporting `createMtaHooks()` (providers/haraka/hooks.ts); may be TypeScript. */
  hooksModule: string;
  /** Extra environment of the Haraka process, for the hooks (DATABASE_URL, CLOUD_MASTER_KEY, ...): never written to disk. */
  env?: Record<string, string>;
  /** `host:port` to relay every message to instead of the recipients' MX; null or unset: MX lookup. */
  smarthost?: string | null;
  /** Haraka's `temp_fail_intervals` (`'5s*1'`); unset: its default (13 retries, from 64 s doubling). */
  tempFailIntervals?: string;
  /** Haraka's log level (`haraka.log` in the data directory); default `notice`. */
  logLevel?: HarakaLogLevel;
  /** `config/me`: banner, Received headers, outbound EHLO. Default: this machine's host name. */
  hostname?: string;
  startTimeoutMs?: number;
}

const serverOf =
  (dataDir: string) =>
  (args: string[]): boolean => {
    const at = args.findIndex((a) => a.endsWith(`${path.sep}${path.join('providers', 'haraka', 'launcher.js')}`));
    return at >= 0 && args[at + 1] === '-c' && args[at + 2] === dataDir;
  };

function readSettings(dataDir: string): HarakaSettings | null {
  return readJsonFile<HarakaSettings>(path.join(dataDir, SETTINGS));
}

async function chooseSettings(options: HarakaServerOptions): Promise<HarakaSettings> {
  const bindAddress = options.bindAddress ?? '127.0.0.1';
  const asked = options.port ?? 0;
  if (asked !== 0 && (await probeBind(bindAddress, asked)) !== 'free') {
    throw new LocalServerError(`the submission port ${joinHostPort(bindAddress, asked)} is taken`, 'choose a free port, or leave it unset to pick one');
  }
  return { bindAddress, port: asked || (await freeLoopbackPort(bindAddress)) };
}

/** Where a client on this host submits to a server with these settings (a wildcard bind is reached on loopback). */
export function submissionAddress(settings: HarakaSettings): { host: string; port: number } {
  const wildcard = { '0.0.0.0': '127.0.0.1', '::': '::1' } as Record<string, string>;
  return { host: wildcard[settings.bindAddress] ?? settings.bindAddress, port: settings.port };
}

/** `--import` of tsx by URL: the MTA's working directory (its data directory) has no node_modules. */
const tsxLoader = () => pathToFileURL(createRequire(__filename).resolve('tsx')).href;

function checkOptions(options: HarakaServerOptions): void {
  if (!path.isAbsolute(options.hooksModule) || !existsSync(options.hooksModule)) {
    throw new LocalServerError(
      `the MTA hooks module ${options.hooksModule} is not an existing absolute path`,
      'pass the absolute path of a module exporting createMtaHooks()',
    );
  }
  if (options.smarthost) parseSmarthost(options.smarthost);
  if (options.tempFailIntervals !== undefined && !validIntervals(options.tempFailIntervals)) {
    // Haraka would log a syntax error and fall back to its default schedule.
    throw new LocalServerError(
      `tempFailIntervals "${options.tempFailIntervals}" is not Haraka's syntax`,
      "write e.g. '5s*1', '1m,5m*2,1h*3' or 'none' (each delay at least 5s)",
    );
  }
}

/** Haraka's temp_fail_intervals: `none`, or delays (`<number><s|m|h|d>`, at least 5 s) each with an optional `*<count>`. */
function validIntervals(text: string): boolean {
  const spec = text.replace(/\s+/g, '').toLowerCase();
  if (spec === 'none') return true;
  const seconds = { s: 1, m: 60, h: 3600, d: 86400 } as const;
  return spec.split(',').every((element) => {
    const m = /^(\d+(?:\.\d+)?)([smhd])(?:\*(\d+))?$/.exec(element);
    return m !== null && Number(m[1]) * seconds[m[2] as keyof typeof seconds] >= 5;
  });
}

/** Configuration, plugin and directories, written afresh: the data directory holds everything Haraka reads or writes. */
function prepareDataDir(dataDir: string, settings: HarakaSettings, options: HarakaServerOptions): void {
  for (const dir of ['config', 'plugins', 'queue', 'spool']) {
    mkdirSync(path.join(dataDir, dir), { recursive: true, mode: 0o700 });
    chmodSync(path.join(dataDir, dir), 0o700);
  }
  const files = renderHarakaConfig({
    dataDir,
    bindAddress: settings.bindAddress,
    port: settings.port,
    hostname: options.hostname ?? os.hostname(),
    smarthost: options.smarthost ?? null,
    tempFailIntervals: options.tempFailIntervals,
    logLevel: options.logLevel,
  });
  for (const [name, { content, mode }] of files) {
    const file = path.join(dataDir, 'config', name);
    writeFileSync(file, content, { mode });
    chmodSync(file, mode);
  }
  copyFileSync(PLUGIN, path.join(dataDir, 'plugins', 'cloud_mail.js'));
}

function environment(options: HarakaServerOptions): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of PASSED_ENV) if (process.env[name] !== undefined) env[name] = process.env[name];
  return { ...env, ...options.env, CLOUD_MAIL_HOOKS: options.hooksModule };
}

/** A running Haraka of one data directory. */
export class HarakaServer {
  private constructor(
    readonly dataDir: string,
    readonly pid: number,
    readonly settings: HarakaSettings,
    /** Found running (started by another process or an earlier call), not started by this call. */
    readonly adopted: boolean,
  ) {}

  /** Where clients on this host submit. */
  get host(): string {
    return submissionAddress(this.settings).host;
  }

  get port(): number {
    return this.settings.port;
  }

  get logFile(): string {
    return path.join(this.dataDir, LOGFILE);
  }

  /** The settings a data directory holds, running or not (null before its first start): the data plane's and the banner's submission address. */
  static settingsOf(dataDir: string): HarakaSettings | null {
    return readSettings(path.resolve(dataDir));
  }

  /** The data directory's server when its pidfile names a live Haraka of it that greets on its port. */
  static async find(dataDir: string): Promise<HarakaServer | null> {
    const dir = path.resolve(dataDir);
    const live = await liveDaemon<HarakaSettings>(dir, { pidfile: PIDFILE, settingsFile: SETTINGS }, serverOf(dir));
    if (!live) return null;
    const server = new HarakaServer(dir, live.pid, live.settings, true);
    return (await server.answers()) ? server : null;
  }

  /**
   * The data directory's server, ready: the running one (as it was started: its options are not
   * applied again), else started (once, under a lock shared by every process of the host).
   */
  static async start(options: HarakaServerOptions): Promise<HarakaServer> {
    const dataDir = path.resolve(options.dataDir);
    return adoptOrStart({
      dataDir,
      find: () => HarakaServer.find(dataDir),
      prepare: async () => {
        checkOptions(options);
        if (!existsSync(dataDir)) await makeDirectory(dataDir, 0o700);
      },
      stop: () => stopHarakaServer(dataDir),
      launch: () => HarakaServer.launch(dataDir, options),
    });
  }

  private static async launch(dataDir: string, options: HarakaServerOptions): Promise<HarakaServer> {
    let settings = readSettings(dataDir);
    if (!settings) {
      settings = await chooseSettings(options);
      writeFileSync(path.join(dataDir, SETTINGS), JSON.stringify(settings, null, 2), { mode: 0o600 });
    }
    chmodSync(path.join(dataDir, SETTINGS), 0o600);
    prepareDataDir(dataDir, settings, options);
    rmSync(path.join(dataDir, READY), { force: true });
    const logFile = path.join(dataDir, LOGFILE);
    // This Node (24): Haraka's own bin would run on the `node` of PATH.
    const pid = await spawnDetached(process.execPath, ['--import', tsxLoader(), LAUNCHER, '-c', dataDir], {
      cwd: dataDir,
      outputFile: logFile,
      env: environment(options),
    });
    writeFileSync(path.join(dataDir, PIDFILE), `${pid}\n`, { mode: 0o600 });
    const server = new HarakaServer(dataDir, pid, settings, false);
    await awaitDaemonReady({
      what: 'Haraka',
      pid,
      isOurs: serverOf(dataDir),
      // This run's plugin has its hooks (`ready` holds this pid) and the port greets.
      answers: async () => (await readPidFile(path.join(dataDir, READY))) === pid && (await server.answers()),
      timeoutMs: options.startTimeoutMs,
      intervalMs: 50,
      logFile,
      logLines: 20,
      stop: () => server.stop(),
    });
    return server;
  }

  /** True when the submission port greets with 220 (then QUIT). */
  answers(timeoutMs = 1_000): Promise<boolean> {
    return new Promise((resolve) => {
      const socket = net.connect({ host: this.host, port: this.port });
      let received = '';
      let settled = false;
      const done = (ok: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (ok) socket.end('QUIT\r\n');
        else socket.destroy();
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      socket.setEncoding('latin1');
      socket.on('data', (chunk: string) => {
        received += chunk;
        const last = /^(\d{3}) [^\r\n]*\r?\n/m.exec(received);
        if (last) done(last[1] === '220');
      });
      socket.once('error', () => done(false));
      socket.once('close', () => done(false));
    });
  }

  async stop(): Promise<void> {
    await stopHarakaServer(this.dataDir);
    await stopped(this.pid, this.dataDir);
  }
}

/**
 * Stops the server `pid` of `dataDir` and waits until it has exited. stopProcess alone may return a
 * moment early: Haraka renames the process (process.title, which rewrites its command line) in its
 * exit handler, after which it no longer looks like the server.
 */
async function stopped(pid: number, dataDir: string): Promise<void> {
  // The process's start time tells it from a later process given the same pid.
  const started = await startTimeOf(pid);
  await stopProcess(pid, serverOf(dataDir), STOP_GRACE_MS);
  await waitFor(async () => !(await processAlive(pid, (args) => serverOf(dataDir)(args) || args[0] === 'haraka')), 5_000, 20);
  // On a loaded machine its exit handler can outlast the wait, under a name no longer its own: it
  // is still ours (same start time), and a stop that returns must mean it is gone.
  if (started === null || (await startTimeOf(pid)) !== started) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // exited meanwhile
  }
  await waitFor(async () => (await startTimeOf(pid)) !== started, 10_000, 20);
}

/** The start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot), or null when there is no such live process. */
async function startTimeOf(pid: number): Promise<string | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // A zombie has exited: only its parent's reaping is left.
    return fields[0] === 'Z' || fields[0] === 'X' ? null : (fields[19] ?? null);
  } catch {
    return null;
  }
}

/** Stops the Haraka of `dataDir` through its pidfile (SIGTERM: graceful; SIGKILL after a grace period); nothing running is fine. */
export async function stopHarakaServer(dataDir: string): Promise<void> {
  const dir = path.resolve(dataDir);
  const pidfile = path.join(dir, PIDFILE);
  const pid = await readPidFile(pidfile);
  if (pid !== null) await stopped(pid, dir);
  rmSync(pidfile, { force: true });
  rmSync(path.join(dir, READY), { force: true });
}
