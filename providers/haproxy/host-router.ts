import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import net, { isIP } from 'node:net';
import path from 'node:path';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { adoptOrStart, freePort, joinHostPort, LocalServerError, makeDirectory, readJsonFile, stopProcess, waitFor, withFileLock } from '../local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, removeAccount } from '../os-accounts';
import {
  checkConfig,
  cliCommand,
  defaultHaproxyBinary,
  isMasterOf,
  masterOf,
  parseShowProc,
  parseShowStat,
  probeBind,
  readPid,
  sleep,
  startMaster,
  type ProcState,
} from './haproxy.process';
import {
  activeTarget,
  assertAppId,
  assertTarget,
  checkedHosts,
  ownerOf,
  parseMap,
  renderMap,
  renderRouterConfig,
  ROUTER_BACKEND,
  sameTarget,
  type RouteTarget,
  type RouterState,
  type Slot,
} from './host-router.config';

export type { RouteTarget } from './host-router.config';

/**
 * One CaaS service's ingress: a HAProxy (master-worker, daemonised) that routes HTTP requests to
 * the service's apps by their `Host` header, through a map file, and switches an app from one
 * container to the next without refusing a request (docs/research/caas-podman.md section 5).
 *
 * Like the load balancers' HAProxy (haproxy.adapter.ts), it outlives the process that started it
 * and is found again through its pidfile; everything it uses is in its own directory (0700, root's):
 * `server.json` (address and port, fixed at the first start), `apps.json` (the desired state, which
 * the configuration and the map are rendered from), `haproxy.cfg`, `hosts.map`, the sockets (0600),
 * the pidfile. With root, its workers run as an account of their own in an empty chroot.
 *
 * Which changes cost what:
 * - a new or removed app changes the backends: the files are rendered again, checked, and the
 *   master reloads (seamless: the new worker takes the listening socket over);
 * - a host name added or removed: the map file is rewritten and the running worker told through
 *   the runtime API (`add map`/`del map`), no reload;
 * - a switch of container: `set server` on the runtime API, and the configuration file rewritten
 *   (not reloaded) so that the next reload or start keeps the new target.
 * A runtime command HAProxy refuses (it runs an older file after a failed reload) falls back to a
 * reload of the files, which are always written first. While it is stopped a change only writes the
 * files, and the next `start` runs them.
 */

export interface HostRouterOptions {
  /** This router's directory: configuration, map, sockets, pidfile, state. */
  dataDir: string;
  /** The service's `ip` (127.0.0.1 locally); fixed at the first start. */
  bindAddress: string;
  /** The ingress port; chosen free at the first start when unset, then kept in server.json. */
  port?: number;
  binary?: string;
}

/** What a router keeps in `server.json`: where it listens and who its workers run as, fixed at its first start. */
interface RouterSettings {
  bindAddress: string;
  port: number;
  /** The workers' account (only when the control plane is root); removed with the router. */
  account?: string;
  createdAt: string;
}

const SETTINGS = 'server.json';
const STATE = 'apps.json';
const CONFIG = 'haproxy.cfg';
const NEXT_CONFIG = 'haproxy.cfg.next';
const MAP = 'hosts.map';
const PIDFILE = 'haproxy.pid';
const MASTER_SOCKET = 'master.sock';
const STATS_SOCKET = 'stats.sock';
const CHROOT = 'empty';
const LOCK = 'apply.lock';
/** A Linux unix socket path holds at most 107 bytes. */
const MAX_SOCKET_PATH = 107;
/** The directory is interpolated into configuration lines and runtime commands: no space, quote, `#` or `;`. */
const SAFE_PATH = /^\/[A-Za-z0-9._/-]+$/;
const DEFAULT_DRAIN_MS = 1_000;
const TIMEOUT_MS = 10_000;
/** How long a switch's new target gets to accept a TCP connection before the switch is refused. */
const PROBE_MS = 2_000;

class Files {
  constructor(readonly dir: string) {}
  at = (name: string) => path.join(this.dir, name);
  get config() {
    return this.at(CONFIG);
  }
  get map() {
    return this.at(MAP);
  }
  get masterSocket() {
    return this.at(MASTER_SOCKET);
  }
  get statsSocket() {
    return this.at(STATS_SOCKET);
  }
  get pidfile() {
    return this.at(PIDFILE);
  }
}

export class HostRouter {
  /** Changes to one router, one at a time inside this process (the lock file does it across processes). */
  private static readonly queues = new Map<string, Promise<unknown>>();
  private readonly files: Files;

  private constructor(
    readonly dataDir: string,
    private readonly settings: RouterSettings,
    private readonly bin: string,
  ) {
    this.files = new Files(dataDir);
  }

  get port(): number {
    return this.settings.port;
  }

  get bindAddress(): string {
    return this.settings.bindAddress;
  }

  /**
   * The directory's router, running: the one found through its pidfile (as it runs: the options are
   * not applied again), else started from its files (once, under a lock every process shares). A
   * first start chooses the port and the workers' account and keeps them.
   */
  static async start(options: HostRouterOptions): Promise<HostRouter> {
    const dir = checkedDirectory(options.dataDir);
    const bin = options.binary ?? defaultHaproxyBinary();
    return adoptOrStart({
      dataDir: dir,
      find: () => HostRouter.find(dir, bin),
      prepare: () => makeDirectory(dir, 0o700),
      stop: () => stopMaster(new Files(dir)),
      launch: () => HostRouter.launch(dir, bin, options),
    });
  }

  /** The directory's router when its HAProxy master runs and answers, else null. */
  static async find(dataDir: string, binary?: string): Promise<HostRouter | null> {
    const dir = path.resolve(dataDir);
    const settings = readJsonFile<RouterSettings>(path.join(dir, SETTINGS));
    const files = new Files(dir);
    if (!settings || (await masterPid(files)) === null) return null;
    const proc = await showProc(files);
    return proc && proc.workers.length > 0 ? new HostRouter(dir, settings, binary ?? defaultHaproxyBinary()) : null;
  }

  private static async launch(dir: string, bin: string, options: HostRouterOptions): Promise<HostRouter> {
    const settings = readJsonFile<RouterSettings>(path.join(dir, SETTINGS)) ?? (await firstSettings(dir, options));
    const router = new HostRouter(dir, settings, bin);
    const state = await router.readState();
    await router.writeMap(state);
    await router.writeConfig(state);
    await router.startProcess();
    return router;
  }

  // --- the API --------------------------------------------------------------------------------

  /**
   * Declares app `appId`, the host names that reach it (the whole set) and its container (null:
   * none, its hosts answer 404). A new app reloads; host names change through the runtime API; a
   * different target is switched to as `switchTo` does. A host name of another app is refused.
   */
  async setApp(appId: string, hosts: string[], target: RouteTarget | null): Promise<void> {
    assertAppId(appId);
    const wanted = checkedHosts(hosts);
    if (target !== null) assertTarget(target);
    await this.exclusive(async () => {
      const state = await this.readState();
      wanted.forEach((host, i) => {
        const owner = ownerOf(state, host);
        if (owner && owner !== appId) throw new BackendRefusedError(ROUTER_BACKEND, `${host} already routes to ${owner}.`, 'conflict', `hosts.${i}`);
      });
      const app = state.apps[appId];
      if (!app) {
        state.apps[appId] = { hosts: wanted, slots: { s1: target, s2: null }, active: target ? 's1' : null };
        return this.applyWithReload(state);
      }
      await this.changeHosts(state, appId, wanted);
      if (sameTarget(activeTarget(app), target)) return;
      if (target) await this.switchLocked(state, appId, target, DEFAULT_DRAIN_MS);
      else await this.clearTarget(state, appId);
    });
  }

  /**
   * Zero-downtime switch to `target`: the idle slot gets its address and is made ready, the active
   * slot is drained (its requests in flight finish; new ones go to the new slot), the configuration
   * file is rewritten with the new state, and after `drainMs` the old slot goes to maintenance.
   * Resolves then: the previous container may be stopped. A target that does not accept a TCP
   * connection is refused before anything changes.
   */
  async switchTo(appId: string, target: RouteTarget, drainMs = DEFAULT_DRAIN_MS): Promise<void> {
    assertAppId(appId);
    assertTarget(target);
    await this.exclusive(async () => {
      const state = await this.readState();
      if (!state.apps[appId]) throw new BackendGoneError(ROUTER_BACKEND, `app ${appId}`);
      await this.switchLocked(state, appId, target, drainMs);
    });
  }

  /** Removes the app, its backend and its host names (they answer 404); an unknown app is fine. */
  async removeApp(appId: string): Promise<void> {
    assertAppId(appId);
    await this.exclusive(async () => {
      const state = await this.readState();
      if (!state.apps[appId]) return;
      delete state.apps[appId];
      await this.applyWithReload(state);
    });
  }

  /** Host names currently routed, per app (from the map file). */
  async routes(): Promise<Record<string, string[]>> {
    return parseMap(await readFile(this.files.map, 'utf8').catch(() => ''));
  }

  /** Stops the HAProxy; its files stay, and the next `start` brings it back as it was. */
  async stop(): Promise<void> {
    if (!existsSync(this.dataDir)) return; // destroyed already
    await this.exclusive(() => stopMaster(this.files));
  }

  /** Stops it, removes its directory and its workers' account. */
  async destroy(): Promise<void> {
    await this.stop();
    await rm(this.dataDir, { recursive: true, force: true });
    if (this.settings.account) await removeAccount(this.settings.account);
  }

  // --- changes --------------------------------------------------------------------------------

  /** The whole set of files for `state`, then a reload when HAProxy runs (the backends changed). */
  private async applyWithReload(state: RouterState): Promise<void> {
    const next = await this.checkedConfig(state);
    await this.saveState(state);
    await this.writeMap(state);
    await rename(next, this.files.config);
    if ((await masterPid(this.files)) !== null) await this.reload();
  }

  /** Host names changed: the map file, then the running worker through the runtime API. */
  private async changeHosts(state: RouterState, appId: string, wanted: string[]): Promise<void> {
    const app = state.apps[appId];
    const added = wanted.filter((h) => !app.hosts.includes(h));
    const removed = app.hosts.filter((h) => !wanted.includes(h));
    if (added.length === 0 && removed.length === 0) return;
    app.hosts = wanted;
    await this.saveState(state);
    await this.writeMap(state);
    await this.runtime([...removed.map((h) => `del map ${this.files.map} ${h}`), ...added.map((h) => `add map ${this.files.map} ${h} ${appId}`)]);
  }

  /**
   * The switch itself. The files come first (so a reload at any point, ours or another's, starts
   * the new target); then the runtime API: the idle slot ready before the active one drains, so
   * there is always a usable slot.
   */
  private async switchLocked(state: RouterState, appId: string, target: RouteTarget, drainMs: number): Promise<void> {
    const app = state.apps[appId];
    const from = app.active;
    if (from && sameTarget(app.slots[from], target)) return;
    await probeTarget(target);
    const to: Slot = from === 's1' ? 's2' : 's1';
    app.slots[to] = target;
    app.active = to;
    await this.writeConfigChecked(state);
    if (!(await this.runtime([`set server ${appId}/${to} addr ${target.host} port ${target.port}`, `set server ${appId}/${to} state ready`]))) return;
    await this.waitServerUp(appId, to);
    if (!from || !(await this.runtime([`set server ${appId}/${from} state drain`]))) return;
    await sleep(drainMs);
    await this.runtime([`set server ${appId}/${from} state maint`]);
  }

  /** The app keeps its backend and hosts, with no slot in service: its hosts answer 404. */
  private async clearTarget(state: RouterState, appId: string): Promise<void> {
    const app = state.apps[appId];
    app.active = null;
    await this.writeConfigChecked(state);
    await this.runtime([`set server ${appId}/s1 state maint`, `set server ${appId}/s2 state maint`]);
  }

  /**
   * Runs runtime API commands on the stats socket (nothing when HAProxy is stopped: the files are
   * for its next start). A command HAProxy refuses (an answer other than the expected one) makes
   * the master reload the files instead, which were written first and already say the same.
   * Returns whether the commands applied as such (false: stopped, or reloaded).
   */
  private async runtime(commands: string[]): Promise<boolean> {
    if ((await masterPid(this.files)) === null) return false;
    for (const command of commands) {
      const answer = await cliCommand(this.files.statsSocket, command).catch((err: Error) => `error: ${err.message}`);
      if (!runtimeAccepted(command, answer)) {
        await this.reload();
        return false;
      }
    }
    return true;
  }

  /** Until the stats show `slot` of `appId` up (leaving maintenance it starts up, then checks). */
  private async waitServerUp(appId: string, slot: Slot): Promise<void> {
    await this.waitOrFail('switch', async () => {
      const rows = parseShowStat(await cliCommand(this.files.statsSocket, 'show stat', 1_000).catch(() => ''));
      return rows.some((r) => r.pxname === appId && r.svname === slot && r.status.startsWith('UP'));
    });
  }

  // --- files ----------------------------------------------------------------------------------

  private async readState(): Promise<RouterState> {
    return readJsonFile<RouterState>(this.files.at(STATE)) ?? { apps: {} };
  }

  private async saveState(state: RouterState): Promise<void> {
    await writeAtomic(this.files.at(STATE), JSON.stringify(state, null, 2));
  }

  private async writeMap(state: RouterState): Promise<void> {
    await writeAtomic(this.files.map, renderMap(state));
  }

  /** The state saved and rendered as the configuration file, checked first; no reload. */
  private async writeConfigChecked(state: RouterState): Promise<void> {
    const next = await this.checkedConfig(state);
    await this.saveState(state);
    await rename(next, this.files.config);
  }

  /** At a start: the configuration from the stored state, checked. */
  private async writeConfig(state: RouterState): Promise<void> {
    await rename(await this.checkedConfig(state), this.files.config);
  }

  /** Renders `state` into the next configuration file and has HAProxy check it; returns its path. */
  private async checkedConfig(state: RouterState): Promise<string> {
    await this.prepareAccount(); // the file names the account: HAProxy refuses it if someone removed it
    const next = this.files.at(NEXT_CONFIG);
    const text = renderRouterConfig(state, {
      bindAddress: this.settings.bindAddress,
      port: this.settings.port,
      statsSocket: this.files.statsSocket,
      mapFile: this.files.map,
      ...(this.settings.account ? { account: { name: this.settings.account, chroot: this.files.at(CHROOT) } } : {}),
    });
    await writeFile(next, text, { mode: 0o600 });
    const result = await checkConfig(this.bin, next).catch((err: Error) => ({ ok: false, output: haproxyMissing(this.bin, err) }));
    if (!result.ok) {
      await rm(next, { force: true });
      throw new BackendUnavailableError(ROUTER_BACKEND, `HAProxy refused the host router's configuration: ${firstAlert(result.output)}`);
    }
    return next;
  }

  // --- processes ------------------------------------------------------------------------------

  /** The workers' account exists (made again if removed: the configuration names it) and so does the empty chroot. */
  private async prepareAccount(): Promise<void> {
    await makeDirectory(this.dataDir, 0o700);
    if (!this.settings.account) return;
    await ensureAccount(this.settings.account, { purpose: 'CaaS host router', dataDir: this.dataDir }).catch((err: Error) => {
      throw new BackendUnavailableError(ROUTER_BACKEND, `the host router's account cannot be made: ${err.message}`);
    });
    await mkdir(this.files.at(CHROOT), { recursive: true, mode: 0o700 });
  }

  private async startProcess(): Promise<void> {
    await rm(this.files.masterSocket, { force: true });
    await rm(this.files.statsSocket, { force: true });
    const result = await startMaster(this.bin, { config: this.files.config, pidfile: this.files.pidfile, masterSocket: this.files.masterSocket }).catch(
      (err: Error) => ({ ok: false, output: haproxyMissing(this.bin, err) }),
    );
    if (!result.ok) {
      const where = joinHostPort(this.bindAddress, this.port);
      const inUse = /cannot bind socket|Address already in use/i.test(result.output);
      throw new BackendUnavailableError(
        ROUTER_BACKEND,
        inUse ? `the host router's address ${where} is in use` : `the host router did not start: ${firstAlert(result.output)}`,
      );
    }
    await this.waitOrFail('start', async () => (await this.workerAnswers((await showProc(this.files))?.workers[0])) === true);
  }

  /**
   * A reload through the master CLI (HAProxy 2.6 answers before it happens, so the outcome is read
   * from `show proc`), done once the new worker answers on the stats socket: its listener is up.
   */
  private async reload(): Promise<void> {
    const before = await showProc(this.files);
    if (!before) throw new BackendUnavailableError(ROUTER_BACKEND, 'the host router does not answer');
    await cliCommand(this.files.masterSocket, 'reload').catch(() => '');
    let after: ProcState | null = null;
    await this.waitOrFail('reload', async () => {
      after = await showProc(this.files);
      return after !== null && after.reloads > before.reloads && after.workers.length > 0;
    });
    const done = after as ProcState | null;
    if (done && done.failedReloads > before.failedReloads)
      throw new BackendUnavailableError(ROUTER_BACKEND, 'HAProxy could not load the host router configuration');
    await this.waitOrFail('reload', () => this.workerAnswers(done?.workers[0]));
  }

  /** Whether the stats socket is answered by worker `pid` (the newest one). */
  private async workerAnswers(pid: number | undefined): Promise<boolean> {
    if (pid === undefined) return false;
    const info = await cliCommand(this.files.statsSocket, 'show info', 1_000).catch(() => '');
    return new RegExp(`^Pid: ${pid}$`, 'm').test(info);
  }

  private async waitOrFail(what: string, done: () => Promise<boolean>): Promise<void> {
    if (!(await waitFor(done, TIMEOUT_MS, 20))) throw new BackendUnavailableError(ROUTER_BACKEND, `the host router did not finish its ${what} in time`);
  }

  /** One change at a time: in this process through a promise chain, across processes through `apply.lock`. */
  private async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const previous = HostRouter.queues.get(this.dataDir) ?? Promise.resolve();
    const run = previous.catch(() => undefined).then(() => withFileLock(this.files.at(LOCK), fn, 60_000));
    HostRouter.queues.set(this.dataDir, run);
    try {
      return await run;
    } finally {
      if (HostRouter.queues.get(this.dataDir) === run) HostRouter.queues.delete(this.dataDir);
    }
  }
}

// --- helpers --------------------------------------------------------------------------------

/** The directory, absolute, safe to write into configuration lines and short enough for its sockets. */
function checkedDirectory(dataDir: string): string {
  const dir = path.resolve(dataDir);
  if (!SAFE_PATH.test(dir))
    throw new LocalServerError(`the host router directory ${dir} has characters HAProxy's files cannot hold`, 'use letters, digits, ".", "_", "-" and "/"');
  if (path.join(dir, MASTER_SOCKET).length > MAX_SOCKET_PATH)
    throw new LocalServerError(`the host router directory ${dir} is too deep for a unix socket path`, 'use a shorter data directory');
  return dir;
}

/** The address, the port (asked for, else found free) and the account, at the first start; kept from then on. */
async function firstSettings(dir: string, options: HostRouterOptions): Promise<RouterSettings> {
  if (isIP(options.bindAddress) === 0)
    throw new BackendRefusedError(ROUTER_BACKEND, 'The host router binds an IP address.', 'validation_failed', 'bindAddress');
  let port = options.port;
  if (port === undefined || port === 0) port = await freePort(options.bindAddress, { udp: false });
  else if ((await probeBind(options.bindAddress, port)) !== 'free') {
    throw new BackendUnavailableError(ROUTER_BACKEND, `the host router's address ${joinHostPort(options.bindAddress, port)} cannot be bound`);
  }
  const settings: RouterSettings = {
    bindAddress: options.bindAddress,
    port,
    ...(isolatedAccounts() ? { account: accountNameFor('lb', dir, 'caas-router') } : {}),
    createdAt: new Date().toISOString(),
  };
  await writeAtomic(path.join(dir, SETTINGS), JSON.stringify(settings, null, 2));
  return settings;
}

async function masterPid(files: Files): Promise<number | null> {
  const pid = await readPid(files.pidfile);
  return pid !== null && (await isMasterOf(pid, files.config)) ? pid : null;
}

async function showProc(files: Files): Promise<ProcState | null> {
  return parseShowProc(await cliCommand(files.masterSocket, 'show proc', 1_000).catch(() => ''));
}

async function stopMaster(files: Files): Promise<void> {
  const pid = await masterPid(files);
  if (pid !== null) await stopProcess(pid, masterOf(files.config));
  await rm(files.pidfile, { force: true });
}

/**
 * What a runtime command answers when it worked: nothing for `state`, `add map` and `del map`
 * (a `del map` of a name the worker does not have is fine: the file is what counts), and HAProxy's
 * report of the change for `addr`.
 */
function runtimeAccepted(command: string, answer: string): boolean {
  const text = answer.trim();
  if (text === '') return true;
  if (command.startsWith('del map ') && /^Key not found\.?$/.test(text)) return true;
  return / addr /.test(command) && /changed from|no need to change/.test(text) && !/invalid|error/i.test(text);
}

/** The new container accepts TCP connections, or the switch is refused before the router changes. */
function probeTarget(target: RouteTarget): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: target.host, port: target.port });
    const fail = () => {
      socket.destroy();
      reject(
        new BackendRefusedError(ROUTER_BACKEND, `Nothing accepts connections on ${joinHostPort(target.host, target.port)}.`, 'target_unreachable', 'target'),
      );
    };
    socket.setTimeout(PROBE_MS, fail);
    socket.once('error', fail);
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
  });
}

/** Written beside and renamed over, so neither HAProxy nor a reader ever sees half a file. */
async function writeAtomic(file: string, text: string): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, file);
}

function firstAlert(output: string): string {
  return (output.split('\n').find((l) => /\[(ALERT|ERROR)\]/.test(l)) ?? output.trim().split('\n')[0] ?? '').trim();
}

function haproxyMissing(bin: string, err: Error): string {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return `haproxy cannot be run: ${err.message}`;
  return new LocalServerError(`${bin} is missing: HAProxy is not installed`, 'run bash scripts/install/haproxy.sh (as root)').message;
}
