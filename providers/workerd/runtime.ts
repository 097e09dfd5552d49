/**
 * The functions runtime on workerd (FunctionsRuntime of providers/functions.provider.ts; DECISIONS
 * "Serverless", functions; docs/research/serverless-backends.md section 3): one sandboxed workerd
 * process per tenant (providers/workerd/sandbox.ts) serving the tenant's whole set of functions
 * behind a router worker (providers/workerd/config.ts), invocations proxied from Node
 * (providers/workerd/proxy.ts).
 *
 * - Deploys and removals are blue/green: a new process with the new set in a new deploy directory,
 *   started and answering before the switch; the old one is stopped only after its last request
 *   (SIGTERM, then SIGKILL after a grace). A module that does not load fails the deploy with the
 *   loader's message and the old process serves on. Never `--watch` (it drops connections).
 * - A process that dies (the V8 heap cap of `memoryMb` aborts it, a crash) is started again with the
 *   same set after a back-off; invocations meanwhile wait for it (up to `startTimeoutMs`). One that
 *   stops answering (a function looping) is found by a probe after a 504 and killed, then restarted.
 * - Nothing is kept across restarts of this process: the data plane calls `restore` with what it stored.
 *   The sandboxes end with this process (`--die-with-parent`); a later start removes the directories
 *   an earlier one left.
 */
import { randomBytes } from 'node:crypto';
import { constants, accessSync, promises as fs } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import { BackendUnavailableError } from '../errors';
import {
  checkFunctionName,
  checkFunctionsTenant,
  FunctionMissingError,
  ScriptInvalidError,
  type FunctionsRuntime,
  type InvocationResult,
} from '../functions.provider';
import { findBinary, LocalServerError, makeDirectory, traversalBlocker } from '../local-server';
import { loaderMessage, writeDeployment } from './config';
import { proxyInvocation } from './proxy';
import { Sandbox, SANDBOX_GID, SANDBOX_UID, SandboxStartError, type SandboxBinaries } from './sandbox';

export interface WorkerdRuntimeOptions {
  /** Where the deploy directories go (a `run-<pid>-<id>` directory per runtime inside it). */
  dataDir: string;
  /** The V8 heap cap of each tenant's process (process-wide: one tenant's functions share it). Default 128. */
  memoryMb?: number;
  /** An invocation's wall-time limit: 504 after it, counted as an error. Default 30 s. */
  timeoutMs?: number;
  /** How long a new process may take to load its modules and answer. Default 10 s. */
  startTimeoutMs?: number;
  workerdPath?: string;
  bwrapPath?: string;
  /** Told about processes that died, restarts and failed restarts (for the logs). */
  onEvent?: (tenant: string, message: string) => void;
}

/** Grace for a retired process between SIGTERM and SIGKILL (it has no request left by then). */
const STOP_GRACE_MS = 5_000;
const RESTART_BASE_MS = 100;
const RESTART_MAX_MS = 10_000;
/** A process that served this long before it died starts its back-off from the beginning again. */
const STABLE_AFTER_MS = 30_000;
/** After a timeout: a process whose router does not answer within this is stuck (a loop) and is killed. */
const STUCK_PROBE_MS = 2_000;
const RUN_DIR = /^run-(\d+)-[0-9a-f]+$/;

/** The workerd binary of the npm dependency (@cloudflare/workerd-linux-64; the `workerd` package's postinstall is not needed). */
export function defaultWorkerdBinary(): string {
  const pkg = createRequire(__filename).resolve('@cloudflare/workerd-linux-64/package.json');
  return path.join(path.dirname(pkg), 'bin', 'workerd');
}

/** The binaries, checked: bwrap from Debian's `bubblewrap`, workerd from npm; both reachable by the sandbox's account. */
export function sandboxBinaries(options: Pick<WorkerdRuntimeOptions, 'workerdPath' | 'bwrapPath'>): SandboxBinaries {
  const bwrap = findBinary(options.bwrapPath ?? 'bwrap');
  if (!bwrap) {
    throw new LocalServerError(
      `${options.bwrapPath ?? 'bwrap'} is missing: functions run in bubblewrap sandboxes and bubblewrap is not installed`,
      "install Debian's package bubblewrap (apt-get install bubblewrap), or run bash scripts/install/serverless.sh as root",
    );
  }
  let workerd: string;
  try {
    workerd = options.workerdPath ?? defaultWorkerdBinary();
    accessSync(workerd, constants.X_OK);
  } catch {
    throw new LocalServerError(
      `the workerd binary ${options.workerdPath ?? '(@cloudflare/workerd-linux-64)'} is missing`,
      'run npm install (workerd is an npm dependency)',
    );
  }
  return { bwrap, workerd };
}

/** The sandboxes run as uid 65534 when we are root: every directory down to `dir` must let it pass. */
function requireReachable(dir: string, what: string): void {
  if (process.getuid?.() !== 0) return;
  const blocker = traversalBlocker(dir, { uid: SANDBOX_UID, gid: SANDBOX_GID });
  if (!blocker) return;
  throw new LocalServerError(
    `the functions' sandboxes run as uid ${SANDBOX_UID}, which cannot enter ${blocker.dir} (mode ${blocker.mode.toString(8)}), so ${what} ${dir} is out of their reach`,
    `let other accounts pass with chmod o+x ${blocker.dir}, or use a directory they can reach`,
  );
}

/** What workerd said as it died (`Reached heap limit ... out of memory`, `Received signal #6`), not its stack. */
export function exitReason(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => /fatal|out of memory|received signal|uncaught/i.test(l));
  return lines
    .slice(-2)
    .map((l) => l.trim().slice(0, 200))
    .join(' | ');
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

interface TenantState {
  readonly handle: string;
  /** The functions `has` answers for: a deploy adds at its switch, a removal takes away at once. */
  functions: Map<string, string>;
  /** The process serving, null while one is started again after a death. */
  current: Sandbox | null;
  /** Bumped whenever `functions` or `current` changes: a restart begun for an older state is thrown away. */
  version: number;
  /** Invocations waiting for a process (null: none is coming). */
  waiters: Array<(sandbox: Sandbox | null) => void>;
  restartTimer: NodeJS.Timeout | null;
  failures: number;
  servingSince: number;
}

export class WorkerdRuntime implements FunctionsRuntime {
  private readonly binaries: SandboxBinaries;
  private readonly memoryMb: number;
  private readonly timeoutMs: number;
  private readonly startTimeoutMs: number;
  /** This runtime's own directory under dataDir. */
  private readonly root: string;
  private readonly prepared: Promise<void>;
  private readonly tenants = new Map<string, TenantState>();
  /** Deploys, removals and restores of a tenant, one at a time. */
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Every process started and not yet exited, and the work close() waits for. */
  private readonly sandboxes = new Set<Sandbox>();
  private readonly pending = new Set<Promise<unknown>>();
  private deploySeq = 0;
  private closed = false;

  constructor(private readonly options: WorkerdRuntimeOptions) {
    this.binaries = sandboxBinaries(options);
    this.memoryMb = options.memoryMb ?? 128;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.startTimeoutMs = options.startTimeoutMs ?? 10_000;
    requireReachable(path.dirname(this.binaries.workerd), 'the workerd binary in');
    requireReachable(options.dataDir, 'the functions data directory');
    this.root = path.join(path.resolve(options.dataDir), `run-${process.pid}-${randomBytes(4).toString('hex')}`);
    this.prepared = this.prepare();
    this.prepared.catch(() => undefined); // awaited by every call that needs it
  }

  /** Makes the directories and removes those of runtimes whose process is gone. */
  private async prepare(): Promise<void> {
    await makeDirectory(this.options.dataDir, 0o711);
    for (const entry of await fs.readdir(this.options.dataDir)) {
      const match = RUN_DIR.exec(entry);
      if (match && !processExists(Number(match[1]))) await fs.rm(path.join(this.options.dataDir, entry), { recursive: true, force: true });
    }
    await fs.mkdir(this.root, { mode: 0o711 });
    await fs.chmod(this.root, 0o711);
  }

  has(tenant: string, name: string): boolean {
    return this.tenants.get(tenant)?.functions.has(name) ?? false;
  }

  async deploy(tenant: string, name: string, code: string): Promise<void> {
    checkFunctionsTenant(tenant);
    checkFunctionName(name);
    if (typeof code !== 'string') throw new ScriptInvalidError('the module must be text');
    await this.ready();
    await this.serialised(tenant, async () => {
      const state = this.tenantState(tenant);
      const next = new Map(state.functions).set(name, code);
      let sandbox: Sandbox;
      try {
        sandbox = await this.launch(tenant, next);
      } catch (err) {
        // A first deploy that failed leaves no tenant behind.
        if (state.functions.size === 0 && !state.current && this.tenants.get(tenant) === state) this.tenants.delete(tenant);
        throw err;
      }
      this.switchTo(state, next, sandbox);
      if (this.closed) throw new BackendUnavailableError('functions', 'the functions runtime closed during the deploy');
    });
  }

  async remove(tenant: string, name: string): Promise<boolean> {
    checkFunctionsTenant(tenant);
    checkFunctionName(name);
    await this.ready();
    return this.serialised(tenant, async () => {
      const state = this.tenants.get(tenant);
      if (!state?.functions.has(name)) return false;
      const next = new Map(state.functions);
      next.delete(name);
      // Gone for invocations at once; the process without it follows.
      state.functions = next;
      state.version += 1;
      if (next.size === 0) {
        void this.forget(state, false);
        return true;
      }
      try {
        this.switchTo(state, next, await this.launch(tenant, next));
      } catch (err) {
        // The old process keeps the function but no invocation reaches it any more.
        this.options.onEvent?.(tenant, `the process without ${name} did not start: ${(err as Error).message}`);
        if (!state.current) this.scheduleRestart(state);
      }
      return true;
    });
  }

  async restore(tenant: string, functions: Array<{ name: string; code: string }>): Promise<void> {
    checkFunctionsTenant(tenant);
    for (const f of functions) checkFunctionName(f.name);
    await this.ready();
    await this.serialised(tenant, async () => {
      const set = new Map(functions.map((f) => [f.name, f.code]));
      if (set.size === 0) {
        const state = this.tenants.get(tenant);
        if (state) void this.forget(state, false);
        return;
      }
      const state = this.tenantState(tenant);
      this.switchTo(state, set, await this.launch(tenant, set));
    });
  }

  async invoke(tenant: string, name: string, path: string, req: IncomingMessage, res: ServerResponse): Promise<InvocationResult> {
    const started = performance.now();
    const state = this.tenants.get(tenant);
    if (!state?.functions.has(name)) throw new FunctionMissingError(name);
    const sandbox = state.current ?? (await this.waitServing(state));
    if (!state.functions.has(name)) throw new FunctionMissingError(name);
    if (!sandbox) {
      const text = 'the function is unavailable (its process is starting again)\n';
      res.writeHead(503, { 'content-type': 'text/plain;charset=UTF-8', 'content-length': Buffer.byteLength(text), 'retry-after': '1' });
      res.end(text);
      return { status: 503, errored: true, ms: performance.now() - started };
    }
    const outcome = await proxyInvocation(sandbox, name, path, req, res, Math.max(1, this.timeoutMs - (performance.now() - started)));
    if (outcome === 'missing') throw new FunctionMissingError(name);
    if (outcome.timedOut) this.checkStuck(state, sandbox);
    return { ...outcome.result, ms: performance.now() - started };
  }

  async dropTenant(tenant: string): Promise<void> {
    checkFunctionsTenant(tenant);
    const state = this.tenants.get(tenant);
    const stopped = state ? this.forget(state, true) : Promise.resolve();
    // A deploy under way for it ends by retiring what it started (the tenant is not there any more).
    await this.queues.get(tenant)?.catch(() => undefined);
    await stopped;
    await fs.rm(path.join(this.root, tenant), { recursive: true, force: true });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const state of [...this.tenants.values()]) void this.forget(state, true);
    await Promise.allSettled([...this.queues.values()]);
    await Promise.allSettled([...this.pending]);
    // Anything still running (a launch that finished during close) goes too.
    await Promise.all([...this.sandboxes].map((s) => s.stop(STOP_GRACE_MS)));
    await this.prepared.catch(() => undefined);
    await fs.rm(this.root, { recursive: true, force: true });
  }

  /** For tests and diagnostics: the tenant's serving process (bwrap's and workerd's pids on the host, its port). */
  inspect(tenant: string): { bwrapPid: number; workerdPid: number | null; port: number } | null {
    const current = this.tenants.get(tenant)?.current;
    if (!current?.child.pid) return null;
    return { bwrapPid: current.child.pid, workerdPid: current.workerdPid, port: current.port };
  }

  private async ready(): Promise<void> {
    if (this.closed) throw new BackendUnavailableError('functions', 'the functions runtime is closed');
    await this.prepared;
  }

  private serialised<T>(tenant: string, work: () => Promise<T>): Promise<T> {
    const before = this.queues.get(tenant) ?? Promise.resolve();
    const mine = before.catch(() => undefined).then(work);
    const settled = mine.catch(() => undefined);
    this.queues.set(tenant, settled);
    void settled.then(() => {
      if (this.queues.get(tenant) === settled) this.queues.delete(tenant);
    });
    return mine;
  }

  private tenantState(tenant: string): TenantState {
    let state = this.tenants.get(tenant);
    if (!state) {
      state = { handle: tenant, functions: new Map(), current: null, version: 0, waiters: [], restartTimer: null, failures: 0, servingSince: 0 };
      this.tenants.set(tenant, state);
    }
    return state;
  }

  /**
   * Starts a process for `functions` in a new deploy directory; resolves once it answers. A module
   * that does not load is a ScriptInvalidError with the loader's message; anything else is the
   * backend being unavailable.
   */
  private launch(tenant: string, functions: ReadonlyMap<string, string>): Promise<Sandbox> {
    const work = (async () => {
      const tenantDir = path.join(this.root, tenant);
      await fs.mkdir(tenantDir, { recursive: true, mode: 0o711 });
      this.deploySeq += 1;
      const deployment = await writeDeployment(path.join(tenantDir, `d${this.deploySeq}-${randomBytes(3).toString('hex')}`), functions, this.memoryMb);
      try {
        const sandbox = await Sandbox.start(this.binaries, deployment, this.startTimeoutMs);
        this.sandboxes.add(sandbox);
        void sandbox.exited.then(() => this.sandboxes.delete(sandbox));
        return sandbox;
      } catch (err) {
        await fs.rm(deployment.dir, { recursive: true, force: true });
        throw this.startFailure(err, deployment.dir);
      }
    })();
    this.track(work);
    return work;
  }

  private startFailure(err: unknown, dir: string): Error {
    if (!(err instanceof SandboxStartError)) return new BackendUnavailableError('functions', (err as Error).message);
    const message = loaderMessage(err.stderr, dir);
    if (message) return new ScriptInvalidError(message);
    if (err.timedOut)
      return new ScriptInvalidError(`the functions did not finish loading within ${this.startTimeoutMs} ms (a loop at the top level of a module?)`);
    const detail = err.stderr.trim().split('\n').slice(-3).join(' | ').replaceAll(dir, '<deploy dir>');
    return new BackendUnavailableError('functions', `${err.message}${detail ? `: ${detail}` : ''}`);
  }

  /**
   * Makes `sandbox` (serving `functions`) the tenant's process; the one before is retired. A tenant
   * dropped meanwhile (or the runtime closed) gets nothing: the new process is retired instead.
   */
  private switchTo(state: TenantState, functions: Map<string, string>, sandbox: Sandbox): void {
    if (this.closed || this.tenants.get(state.handle) !== state) return void this.retire(sandbox, true);
    const old = state.current;
    state.current = sandbox;
    state.functions = functions;
    state.version += 1;
    state.servingSince = Date.now();
    if (state.restartTimer) clearTimeout(state.restartTimer);
    state.restartTimer = null;
    this.notify(state, sandbox);
    void sandbox.exited.then(() => this.died(state, sandbox));
    if (old) void this.retire(old);
  }

  private notify(state: TenantState, sandbox: Sandbox | null): void {
    const waiters = state.waiters;
    state.waiters = [];
    for (const w of waiters) w(sandbox);
  }

  /**
   * No process is coming for the tenant any more (dropped, its last function removed, the runtime
   * closing); `now`: its process is stopped without waiting for its requests. Resolves once stopped.
   */
  private forget(state: TenantState, now: boolean): Promise<void> {
    if (this.tenants.get(state.handle) === state) this.tenants.delete(state.handle);
    state.functions = new Map();
    state.version += 1;
    if (state.restartTimer) clearTimeout(state.restartTimer);
    state.restartTimer = null;
    const current = state.current;
    state.current = null;
    this.notify(state, null);
    return current ? this.retire(current, now) : Promise.resolve();
  }

  /** Stops a process once its last request is done (bounded by the invocation limit), or `now`. */
  private retire(sandbox: Sandbox, now = false): Promise<void> {
    const work = (async () => {
      if (!now && !this.closed) await sandbox.idle(this.timeoutMs + 1_000);
      await sandbox.stop(now || this.closed ? 1_000 : STOP_GRACE_MS);
      await fs.rm(sandbox.deployment.dir, { recursive: true, force: true });
    })();
    this.track(work);
    return work.catch(() => undefined);
  }

  private track(work: Promise<unknown>): void {
    const settled = work.catch(() => undefined);
    this.pending.add(settled);
    void settled.then(() => this.pending.delete(settled));
  }

  /** The serving process died on its own (the heap cap, a crash): start it again after a back-off. */
  private died(state: TenantState, sandbox: Sandbox): void {
    void fs.rm(sandbox.deployment.dir, { recursive: true, force: true }).catch(() => undefined);
    if (state.current !== sandbox || this.closed) return;
    state.current = null;
    state.version += 1;
    const why = exitReason(sandbox.stderr);
    this.options.onEvent?.(state.handle, `the tenant's workerd process exited; starting it again${why ? ` (${why})` : ''}`);
    this.scheduleRestart(state);
  }

  private scheduleRestart(state: TenantState): void {
    if (this.closed || state.restartTimer || state.functions.size === 0) return;
    if (Date.now() - state.servingSince > STABLE_AFTER_MS) state.failures = 0;
    const delay = Math.min(RESTART_BASE_MS * 2 ** state.failures, RESTART_MAX_MS);
    state.failures += 1;
    state.restartTimer = setTimeout(() => {
      state.restartTimer = null;
      this.track(this.restart(state));
    }, delay);
  }

  private async restart(state: TenantState): Promise<void> {
    const version = state.version;
    const functions = state.functions;
    let sandbox: Sandbox;
    try {
      sandbox = await this.launch(state.handle, functions);
    } catch (err) {
      this.options.onEvent?.(state.handle, `starting the tenant's workerd process again failed: ${(err as Error).message}`);
      if (state.version === version && !state.current) this.scheduleRestart(state);
      return;
    }
    // A deploy, removal or drop came first: its process (or none) is the tenant's now.
    if (state.version !== version || state.current) return void this.retire(sandbox, true);
    this.switchTo(state, functions, sandbox);
  }

  private waitServing(state: TenantState): Promise<Sandbox | null> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        state.waiters = state.waiters.filter((w) => w !== waiter);
        resolve(null);
      }, this.startTimeoutMs);
      const waiter = (sandbox: Sandbox | null) => {
        clearTimeout(timer);
        resolve(sandbox);
      };
      state.waiters.push(waiter);
    });
  }

  /** After a 504: a process whose router does not answer either is stuck (a function looping) and is killed, then restarted. */
  private checkStuck(state: TenantState, sandbox: Sandbox): void {
    if (sandbox.probing || !sandbox.alive) return;
    sandbox.probing = true;
    sandbox.probe(STUCK_PROBE_MS).then(
      () => (sandbox.probing = false),
      () => {
        sandbox.probing = false;
        if (state.current !== sandbox) return;
        this.options.onEvent?.(state.handle, `the tenant's workerd process does not answer after a timeout; killing it`);
        sandbox.kill();
      },
    );
  }
}
