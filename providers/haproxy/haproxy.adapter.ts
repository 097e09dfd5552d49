import { chmod, copyFile, mkdir, open, readFile, readdir, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { backendTargetErrors, listenerErrors, normalizeListeners, type BackendTargetPolicySource } from '../lb.rules';
import { accountNameFor, ensureAccount, isolatedAccounts, removeAccount } from '../os-accounts';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { balancerAddress, type BalancerStatus, type Health, type LbListener, type LbProvider, type LbStats, type ListenerStats } from '../lb.provider';
import { explainCheckFailure, proxyName, renderConfig, serverName, type RenderedConfig } from './haproxy.config';
import {
  checkConfig,
  cliCommand,
  defaultHaproxyBinary,
  isMasterOf,
  masterOf,
  parseShowProc,
  parseShowStat,
  probeBind,
  processExists,
  readPid,
  sleep,
  startMaster,
  type ProcState,
} from './haproxy.process';
import { LocalServerError, makeDirectory, stopProcess } from '../local-server';

const BACKEND = 'lb';

export interface HaproxyOptions {
  /** One directory per balancer is kept under it (configuration, pidfile, sockets). */
  dataDir: string;
  /** LB_BIND_ADDRESS: one IPv4 address, or a CIDR range from which each balancer gets its own. */
  bindAddress: string;
  haproxyBinary?: string;
  /** How long a reload may take before it counts as failed. */
  reloadTimeoutMs?: number;
  /**
   * Where backends may point now (providers/lb.targets.ts). Checked at every rendering: a backend it
   * refuses is left out of the configuration (no traffic, `down` in stats) while it stays in the
   * stored set. Without it (tests of the adapter alone) every backend of valid form is rendered.
   */
  targets?: BackendTargetPolicySource;
}

interface BalancerMeta {
  serviceId: number;
  address: string;
  createdAt: string;
  /**
   * The operating-system account its HAProxy workers run as, kept here so that whichever process
   * destroys the balancer removes the account it really has. Absent when the control plane has no
   * root (workers run as its own account) and for a balancer made before accounts, until `create`
   * adopts it (see adoptAccount).
   */
  account?: string;
}

/** Bytes counted by the workers of earlier configurations, per listener: a reload starts a worker at zero. */
interface Counters {
  listeners: Record<string, { bytesIn: number; bytesOut: number }>;
}

class Paths {
  constructor(readonly dir: string) {}
  get meta() {
    return path.join(this.dir, 'balancer.json');
  }
  get listeners() {
    return path.join(this.dir, 'listeners.json');
  }
  get config() {
    return path.join(this.dir, 'haproxy.cfg');
  }
  get nextConfig() {
    return path.join(this.dir, 'haproxy.cfg.next');
  }
  get previousConfig() {
    return path.join(this.dir, 'haproxy.cfg.previous');
  }
  get pidfile() {
    return path.join(this.dir, 'haproxy.pid');
  }
  get masterSocket() {
    return path.join(this.dir, 'master.sock');
  }
  get statsSocket() {
    return path.join(this.dir, 'stats.sock');
  }
  get counters() {
    return path.join(this.dir, 'counters.json');
  }
  get lock() {
    return path.join(this.dir, 'apply.lock');
  }
  /** The workers' chroot: empty, root's, mode 0700, so a worker that drops to its account sees nothing at all. */
  get chroot() {
    return path.join(this.dir, 'empty');
  }
}

/** A Linux unix socket path holds at most 107 bytes. */
const MAX_SOCKET_PATH = 107;

/**
 * The real load-balancer backend: one HAProxy process (master-worker, daemonised) per balancer,
 * its files in `<dataDir>/svc-<id>/`. The processes outlive the API and the worker that started
 * them; any later process finds them again through their pidfile, so a restart of the control plane
 * does not touch traffic.
 *
 * A change is all or nothing: the listener rules, a bind probe of the new ports, then `haproxy -c`
 * on the rendered file, and only then the switch of the file and a reload through the master CLI
 * (the new worker takes over the listening sockets; the old one finishes its connections). A reload
 * HAProxy reports as failed puts the previous file back, so the file always describes what runs.
 *
 * With root, each balancer's workers run as an account of its own (`clb-svc-<id>-<hash>`), made
 * with the balancer and removed with it: the master (root) binds the listeners, on every reload too,
 * and the workers that carry the traffic drop to the account inside an empty chroot. The directory
 * stays root's (0700), so no balancer's account can read or write another's configuration or sockets.
 */
export class HaproxyLbProvider implements LbProvider {
  private readonly bin: string;
  private readonly reloadTimeoutMs: number;
  /** Serialises changes to one balancer inside this process; the lock file does it across processes. */
  private readonly queues = new Map<number, Promise<unknown>>();

  constructor(private readonly options: HaproxyOptions) {
    this.bin = options.haproxyBinary ?? defaultHaproxyBinary();
    this.reloadTimeoutMs = options.reloadTimeoutMs ?? 10_000;
    balancerAddress(options.bindAddress, 1); // refuse a bad LB_BIND_ADDRESS at start-up
  }

  private paths(serviceId: number): Paths {
    return new Paths(path.resolve(this.options.dataDir, `svc-${serviceId}`));
  }

  /** The account of balancer `serviceId` under this data directory (two checkouts' `svc-1` get two). */
  private accountName(serviceId: number): string {
    return accountNameFor('lb', path.resolve(this.options.dataDir), `svc-${serviceId}`);
  }

  async create(serviceId: number, listeners: LbListener[] = []): Promise<BalancerStatus> {
    const p = this.paths(serviceId);
    if (p.masterSocket.length > MAX_SOCKET_PATH) throw new Error(`LB data directory ${this.options.dataDir} is too deep for a unix socket path`);
    await makeDirectory(p.dir, 0o700);
    return this.exclusive(serviceId, async () => {
      const existing = await this.readMeta(p);
      if (existing) {
        const meta = await this.adoptAccount(p, existing);
        await this.refreshTargets(p, meta);
        await this.ensureRunning(p, meta);
        return this.statusOf(p, meta);
      }
      const meta: BalancerMeta = {
        serviceId,
        address: balancerAddress(this.options.bindAddress, serviceId),
        createdAt: new Date().toISOString(),
        ...(isolatedAccounts() ? { account: this.accountName(serviceId) } : {}),
      };
      try {
        const set = this.checkRules(listeners, meta.address);
        await this.probePorts(set, [], meta.address);
        await this.prepareAccount(p, meta);
        await this.writeChecked(p, meta, set, p.config);
        await writeJson(p.listeners, set);
      } catch (err) {
        // Refused before the balancer existed: its account goes with the refusal.
        if (meta.account) await removeAccount(meta.account);
        throw err;
      }
      await writeJson(p.meta, meta); // last: a balancer exists once its files are complete
      await this.ensureRunning(p, meta);
      return this.statusOf(p, meta);
    });
  }

  async start(serviceId: number): Promise<BalancerStatus> {
    const p = this.paths(serviceId);
    return this.exclusive(serviceId, async () => {
      const meta = await this.requireMeta(p, serviceId);
      await this.ensureRunning(p, meta);
      return this.statusOf(p, meta);
    });
  }

  async apply(serviceId: number, listeners: LbListener[]): Promise<LbListener[]> {
    const p = this.paths(serviceId);
    return this.exclusive(serviceId, async () => {
      const meta = await this.requireMeta(p, serviceId);
      const set = this.checkRules(listeners, meta.address);
      const current = await this.readListeners(p);
      const running = (await this.masterPid(p)) !== null;
      await this.probePorts(set, running ? current : [], meta.address);
      await this.prepareAccount(p, meta);
      await this.writeChecked(p, meta, set, p.nextConfig);
      await this.switchConfig(p, current, set, running);
      await writeJson(p.listeners, set);
      return set;
    });
  }

  async listeners(serviceId: number): Promise<LbListener[]> {
    const p = this.paths(serviceId);
    await this.requireMeta(p, serviceId);
    return this.readListeners(p);
  }

  async status(serviceId: number): Promise<BalancerStatus> {
    const p = this.paths(serviceId);
    return this.statusOf(p, await this.requireMeta(p, serviceId));
  }

  async stats(serviceId: number): Promise<LbStats> {
    const p = this.paths(serviceId);
    await this.requireMeta(p, serviceId);
    const listeners = await this.readListeners(p);
    const running = (await this.masterPid(p)) !== null;
    if (!running) return { listeners: listeners.map((l) => zeroStats(l, 'down')) };
    let rows: Array<Record<string, string>>;
    try {
      rows = parseShowStat(await cliCommand(p.statsSocket, 'show stat'));
    } catch {
      return { listeners: listeners.map((l) => zeroStats(l, 'unknown')) };
    }
    const carried = await this.counters(p);
    return { listeners: listeners.map((l) => listenerStats(l, rows, carried)) };
  }

  async stop(serviceId: number): Promise<void> {
    const p = this.paths(serviceId);
    await this.exclusive(serviceId, async () => {
      if (!(await this.readMeta(p))) return;
      await this.stopProcess(p);
    });
  }

  async destroy(serviceId: number): Promise<void> {
    const p = this.paths(serviceId);
    await this.exclusive(serviceId, async () => {
      const meta = await this.readMeta(p).catch(() => null);
      await this.stopProcess(p);
      await rm(p.dir, { recursive: true, force: true });
      // The recorded account; without a record (a create cut off before it wrote one) the derived
      // name, which is absent when there is nothing to remove.
      await removeAccount(meta?.account ?? this.accountName(serviceId));
    });
  }

  /**
   * Stops every balancer's HAProxy under the data directory, keeping its files: the end of a local
   * run (scripts/dev.ts), whose next start brings them back through the seed and the keeper. Not
   * part of LbProvider: in production balancers outlive the control plane.
   */
  async stopAll(): Promise<void> {
    for (const id of await this.balancerIds()) await this.stop(id);
  }

  /** Destroys every balancer under the data directory (a test stack's teardown; not part of LbProvider). */
  async destroyAll(): Promise<void> {
    for (const id of await this.balancerIds()) await this.destroy(id);
  }

  /** The services whose balancer has a directory here (a host adopts them when it starts; not part of LbProvider). */
  async balancerIds(): Promise<number[]> {
    const entries = await readdir(this.options.dataDir).catch(() => [] as string[]);
    return entries.flatMap((entry) => {
      const id = /^svc-(\d+)$/.exec(entry);
      return id ? [Number(id[1])] : [];
    });
  }

  // --- configuration --------------------------------------------------------------------------

  private checkRules(listeners: LbListener[], address: string): LbListener[] {
    const errors = listenerErrors(listeners, { address });
    if (errors.length > 0) throw refused(errors[0].param, errors[0].message);
    return normalizeListeners(listeners);
  }

  /**
   * Ports this balancer does not hold yet must be free on its address; HAProxy itself would only
   * say so in the middle of a reload.
   */
  private async probePorts(set: LbListener[], held: LbListener[], address: string): Promise<void> {
    const heldPorts = new Set(held.map((l) => l.port));
    for (const [i, listener] of set.entries()) {
      if (heldPorts.has(listener.port)) continue;
      const result = await probeBind(address, listener.port);
      if (result === 'in_use') throw refused(`listeners.${i}.port`, `port ${listener.port} is already in use on ${address}`);
      if (result === 'not_permitted') throw refused(`listeners.${i}.port`, `port ${listener.port} may not be bound on ${address}`);
      if (result === 'no_address') throw new BackendUnavailableError(BACKEND, `address ${address} cannot be bound on this host`);
    }
  }

  /** Renders the set into `target` and has HAProxy check it; a rejected file is removed. */
  private async writeChecked(p: Paths, meta: BalancerMeta, set: LbListener[], target: string): Promise<void> {
    const rendered = await this.render(p, meta, set);
    await writeFile(target, rendered.text, { mode: 0o600 });
    let result;
    try {
      result = await checkConfig(this.bin, target);
    } catch (err) {
      await rm(target, { force: true });
      throw new BackendUnavailableError(BACKEND, haproxyMissing(this.bin, err));
    }
    if (!result.ok) {
      await rm(target, { force: true });
      const failure = explainCheckFailure(result.output, rendered);
      throw refused(failure.param, failure.message);
    }
  }

  private async render(p: Paths, meta: BalancerMeta, set: LbListener[]): Promise<RenderedConfig> {
    return renderConfig(set, {
      address: meta.address,
      statsSocket: p.statsSocket,
      serviceId: meta.serviceId,
      ...(meta.account ? { account: { name: meta.account, chroot: p.chroot } } : {}),
      leaveOut: await this.refusedBackends(set),
    });
  }

  // --- backend targets (docs/lb.md "Backend addresses") ----------------------------------------

  /** The backends the target policy refuses now, by `listener.backend` index, with the reason. */
  private async refusedBackends(set: LbListener[]): Promise<Map<string, string>> {
    const refused = new Map<string, string>();
    if (!this.options.targets) return refused;
    for (const error of backendTargetErrors(set, await this.options.targets())) {
      const at = /^listeners\.(\d+)\.backends\.(\d+)\./.exec(error.param);
      if (at) refused.set(`${at[1]}.${at[2]}`, error.message);
    }
    return refused;
  }

  /**
   * The stored set rendered again when the policy now judges one of its backends differently (a
   * port became a database instance's, the flag was turned off): the keeper's pass calls `create`
   * on every balancer, so a backend that may no longer be served stops getting traffic within one
   * LB_KEEPER_INTERVAL. Nothing happens while the rendering is the file already there.
   */
  private async refreshTargets(p: Paths, meta: BalancerMeta): Promise<void> {
    if (!this.options.targets) return;
    const set = await this.readListeners(p);
    const current = await readFile(p.config, 'utf8').catch(() => null);
    if (current === null || (await this.render(p, meta, set)).text === current) return;
    await this.writeChecked(p, meta, set, p.nextConfig);
    await this.switchConfig(p, set, set, (await this.masterPid(p)) !== null);
  }

  /**
   * Puts the checked `nextConfig` in place: a reload when HAProxy runs (the previous file comes back
   * if the reload fails), otherwise only the file, for the next start.
   */
  private async switchConfig(p: Paths, current: LbListener[], set: LbListener[], running: boolean): Promise<void> {
    if (!running) {
      await rename(p.nextConfig, p.config);
      return;
    }
    const before = await this.counters(p);
    const carried = await this.carryCounters(p, before, current, set);
    await copyFile(p.config, p.previousConfig);
    await rename(p.nextConfig, p.config);
    try {
      await this.reload(p);
    } catch (err) {
      await rename(p.previousConfig, p.config);
      throw err;
    }
    await writeJson(p.counters, carried);
    await rm(p.previousConfig, { force: true });
  }

  // --- accounts -------------------------------------------------------------------------------

  /**
   * The balancer's account exists (it is made again if someone removed it: the configuration names
   * it, and HAProxy refuses a file naming an unknown user) and so does the empty chroot.
   */
  private async prepareAccount(p: Paths, meta: BalancerMeta): Promise<void> {
    if (!meta.account) return;
    try {
      await ensureAccount(meta.account, { purpose: `load balancer svc_${meta.serviceId}`, dataDir: p.dir });
    } catch (err) {
      throw new BackendUnavailableError(BACKEND, `the load balancer's account cannot be made: ${(err as Error).message}`);
    }
    await chmod(p.dir, 0o700); // a directory made by an older version or another tool: root's alone again
    await mkdir(p.chroot, { recursive: true, mode: 0o700 });
  }

  /**
   * A balancer made before accounts (or by a control plane without root) whose workers still run
   * as root moves to an account of its own: its stored set is rendered again with the account and
   * reloaded (no connection is refused, as with any change). The keeper's pass calls `create` on
   * every balancer, so this happens within one LB_KEEPER_INTERVAL of an upgraded worker starting.
   * If the reload is refused the balancer keeps running as it did, and the next pass tries again.
   * A balancer that has its account gets it made again if it was removed behind our back.
   */
  private async adoptAccount(p: Paths, meta: BalancerMeta): Promise<BalancerMeta> {
    if (meta.account) await this.prepareAccount(p, meta);
    if (meta.account || !isolatedAccounts()) return meta;
    const adopted: BalancerMeta = { ...meta, account: this.accountName(meta.serviceId) };
    const set = await this.readListeners(p);
    await this.prepareAccount(p, adopted);
    await this.writeChecked(p, adopted, set, p.nextConfig);
    await this.switchConfig(p, set, set, (await this.masterPid(p)) !== null);
    await writeJson(p.meta, adopted);
    return adopted;
  }

  // --- processes ------------------------------------------------------------------------------

  /** The master's pid when this balancer's HAProxy runs. */
  private async masterPid(p: Paths): Promise<number | null> {
    const pid = await readPid(p.pidfile);
    return pid !== null && (await isMasterOf(pid, p.config)) ? pid : null;
  }

  private async ensureRunning(p: Paths, meta: BalancerMeta): Promise<void> {
    if ((await this.masterPid(p)) !== null) return;
    await this.prepareAccount(p, meta);
    await rm(p.masterSocket, { force: true });
    await rm(p.statsSocket, { force: true });
    let result;
    try {
      result = await startMaster(this.bin, { config: p.config, pidfile: p.pidfile, masterSocket: p.masterSocket });
    } catch (err) {
      throw new BackendUnavailableError(BACKEND, haproxyMissing(this.bin, err));
    }
    if (!result.ok) {
      const inUse = /cannot bind socket|Address already in use/i.test(result.output);
      throw new BackendRefusedError(
        BACKEND,
        inUse ? 'The load balancer could not start: one of its ports is in use on its address.' : 'The load balancer could not start.',
        'start_failed',
      );
    }
    await writeJson(p.counters, { listeners: {} } satisfies Counters);
    await this.waitFor(p, async () => (await this.proc(p)) !== null, 'start');
  }

  private async proc(p: Paths): Promise<ProcState | null> {
    try {
      return parseShowProc(await cliCommand(p.masterSocket, 'show proc', 1_000));
    } catch {
      return null;
    }
  }

  /**
   * A reload through the master CLI: the master re-executes itself with the (already checked)
   * file and forks a new worker, which takes the listening sockets over. HAProxy 2.6 answers
   * `reload` before it happens, so the outcome is read from `show proc`: the reload count goes
   * up, and the failed-reload count with it when the new configuration could not start.
   */
  private async reload(p: Paths): Promise<void> {
    const before = await this.proc(p);
    if (!before) throw new BackendUnavailableError(BACKEND, 'the HAProxy master does not answer');
    await cliCommand(p.masterSocket, 'reload').catch(() => '');
    let after: ProcState | null = null;
    await this.waitFor(
      p,
      async () => {
        after = await this.proc(p);
        return after !== null && after.reloads > before.reloads && after.workers.length > 0;
      },
      'reload',
    );
    const done = after as ProcState | null;
    if (done && done.failedReloads > before.failedReloads) {
      throw refused('listeners', 'HAProxy could not start the new configuration (a port may have been taken meanwhile); the previous one keeps running.');
    }
    // Answered by the new worker: its listeners are up.
    const worker = done?.workers[0];
    await this.waitFor(
      p,
      async () => {
        const info = await cliCommand(p.statsSocket, 'show info', 1_000).catch(() => '');
        return new RegExp(`^Pid: ${worker}$`, 'm').test(info);
      },
      'reload',
    );
  }

  private async waitFor(p: Paths, done: () => Promise<boolean>, what: string): Promise<void> {
    const deadline = Date.now() + this.reloadTimeoutMs;
    while (Date.now() < deadline) {
      if (await done()) return;
      await sleep(20);
    }
    throw new BackendUnavailableError(BACKEND, `HAProxy of ${path.basename(p.dir)} did not finish its ${what} in time`);
  }

  private async stopProcess(p: Paths): Promise<void> {
    const pid = await this.masterPid(p);
    if (pid === null) return;
    await stopProcess(pid, masterOf(p.config));
    await rm(p.pidfile, { force: true });
  }

  // --- state on disk --------------------------------------------------------------------------

  private async readMeta(p: Paths): Promise<BalancerMeta | null> {
    return readJson<BalancerMeta>(p.meta);
  }

  private async requireMeta(p: Paths, serviceId: number): Promise<BalancerMeta> {
    const meta = await this.readMeta(p);
    if (!meta) throw new BackendGoneError(BACKEND, `load balancer svc_${serviceId}`);
    return meta;
  }

  private async readListeners(p: Paths): Promise<LbListener[]> {
    return (await readJson<LbListener[]>(p.listeners)) ?? [];
  }

  private async counters(p: Paths): Promise<Counters> {
    return (await readJson<Counters>(p.counters)) ?? { listeners: {} };
  }

  /** The bytes the current worker counted, added to what earlier workers counted, for the listeners that stay. */
  private async carryCounters(p: Paths, before: Counters, current: LbListener[], next: LbListener[]): Promise<Counters> {
    const rows = parseShowStat(await cliCommand(p.statsSocket, 'show stat').catch(() => ''));
    const keep = new Set(next.map((l) => l.name));
    const carried: Counters = { listeners: {} };
    for (const listener of current) {
      if (!keep.has(listener.name)) continue;
      const front = rows.find((r) => r.pxname === proxyName(listener.name) && r.svname === 'FRONTEND');
      const earlier = before.listeners[listener.name] ?? { bytesIn: 0, bytesOut: 0 };
      carried.listeners[listener.name] = {
        bytesIn: earlier.bytesIn + Number(front?.bin ?? 0),
        bytesOut: earlier.bytesOut + Number(front?.bout ?? 0),
      };
    }
    return carried;
  }

  private async statusOf(p: Paths, meta: BalancerMeta): Promise<BalancerStatus> {
    const listeners = await this.readListeners(p);
    const running = (await this.masterPid(p)) !== null;
    let healthy: boolean | null = false;
    if (running) {
      const stats = await this.stats(meta.serviceId);
      healthy = stats.listeners.some((l) => l.state === 'unknown') ? null : stats.listeners.every((l) => l.state === 'up');
    }
    return { serviceId: meta.serviceId, address: meta.address, state: running ? 'running' : 'stopped', listenerCount: listeners.length, healthy };
  }

  /**
   * One change at a time per balancer: in this process through a promise chain, across processes
   * (API and worker) through a lock file naming its holder, taken over when the holder is gone.
   */
  private async exclusive<T>(serviceId: number, fn: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(serviceId) ?? Promise.resolve();
    const run = previous.catch(() => undefined).then(() => this.withLockFile(this.paths(serviceId), fn));
    this.queues.set(serviceId, run);
    try {
      return await run;
    } finally {
      if (this.queues.get(serviceId) === run) this.queues.delete(serviceId);
    }
  }

  private async withLockFile<T>(p: Paths, fn: () => Promise<T>): Promise<T> {
    await makeDirectory(p.dir, 0o700);
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        const handle = await open(p.lock, 'wx');
        await handle.writeFile(String(process.pid));
        await handle.close();
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        const holder = Number(await readFile(p.lock, 'utf8').catch(() => ''));
        const age = await stat(p.lock)
          .then((s) => Date.now() - s.mtimeMs)
          .catch(() => 0);
        if ((holder > 0 && !processExists(holder)) || age > 120_000) await unlink(p.lock).catch(() => undefined);
        else if (Date.now() > deadline) throw new BackendUnavailableError(BACKEND, 'another change to this load balancer does not finish');
        else await sleep(25);
      }
    }
    try {
      return await fn();
    } finally {
      await unlink(p.lock).catch(() => undefined);
    }
  }
}

/** What a failure to run the binary means: usually that HAProxy is not installed (the kit's install check says how to fix it). */
function haproxyMissing(bin: string, err: unknown): string {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return `haproxy cannot be run: ${(err as Error).message}`;
  return new LocalServerError(`${bin} is missing: HAProxy is not installed`, 'run bash scripts/install/haproxy.sh (as root)').message;
}

function refused(param: string, message: string): BackendRefusedError {
  return new BackendRefusedError(BACKEND, message, 'validation_failed', param);
}

function zeroStats(listener: LbListener, state: Health): ListenerStats {
  return {
    name: listener.name,
    state,
    currentConnections: 0,
    bytesIn: 0,
    bytesOut: 0,
    backends: listener.backends.map((b) => ({ ip: b.ip, port: b.port, health: 'unknown' as const })),
  };
}

/** HAProxy's server status words: `UP`, `UP 1/2` (failing), `DOWN 1/2` (recovering), `MAINT`, `no check`... */
function healthOf(status: string | undefined): Health {
  if (!status) return 'unknown';
  if (status.startsWith('UP') || status === 'NOLB' || status === 'DRAIN') return 'up';
  if (status.startsWith('DOWN') || status.startsWith('MAINT')) return 'down';
  return 'unknown';
}

function listenerStats(listener: LbListener, rows: Array<Record<string, string>>, carried: Counters): ListenerStats {
  const proxy = proxyName(listener.name);
  const front = rows.find((r) => r.pxname === proxy && r.svname === 'FRONTEND');
  const back = rows.find((r) => r.pxname === proxy && r.svname === 'BACKEND');
  if (!front) return zeroStats(listener, 'unknown');
  const earlier = carried.listeners[listener.name] ?? { bytesIn: 0, bytesOut: 0 };
  const state: Health = front.status !== 'OPEN' ? 'down' : back?.status === 'DOWN' ? 'down' : 'up';
  return {
    name: listener.name,
    state,
    currentConnections: Number(front.scur) || 0,
    bytesIn: earlier.bytesIn + (Number(front.bin) || 0),
    bytesOut: earlier.bytesOut + (Number(front.bout) || 0),
    backends: listener.backends.map((b, j) => {
      const row = rows.find((r) => r.pxname === proxy && r.svname === serverName(j));
      // No row: the backend was left out of the configuration (its target is refused), so it gets no traffic.
      return { ip: b.ip, port: b.port, health: row ? healthOf(row.status) : ('down' as const) };
    }),
  };
}

async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Written beside and renamed over, so a reader never sees half a file. */
async function writeJson(file: string, value: unknown): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(value, null, 2), { mode: 0o600 });
  await rename(tmp, file);
}
