/**
 * One tenant's workerd process, sandboxed by bubblewrap (docs/research/serverless-backends.md
 * section 3): its own user, pid, ipc, uts, cgroup and network namespaces (`--unshare-all`: no
 * network at all, not even loopback), uid and gid 65534 on the host as well as inside (bwrap is
 * started as 65534, so the user namespace maps 65534 to 65534, never to root), no capabilities,
 * an empty environment, and read-only binds of only the libraries, the CA certificates (workerd
 * aborts without them), the binary and this deploy's directory.
 *
 * The listening socket is opened here, by Node (a `net.Server` on 127.0.0.1:0), and handed down as
 * fd 3 (`stdio[3]`, kept across bwrap's exec) for `--socket-fd http=3`; Node closes its own copy at
 * once, so only workerd accepts on it. workerd reports through `--control-fd 4` when it listens (its
 * config and modules are loaded by then), and bwrap reports the host pid of workerd through
 * `--info-fd 5` (`--as-pid-1`: workerd is the namespace's pid 1, so our SIGTERM reaches it; with
 * bwrap's own init in between it would not be forwarded). `--die-with-parent`: the sandboxes end
 * with the Node process that started them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { CONFIG_FILE, SANDBOX_CONFIG_DIR, STATUS_HEADER, type Deployment } from './config';

/** The host account the sandboxes run as (Debian's `nobody`/`nogroup`). */
export const SANDBOX_UID = 65534;
export const SANDBOX_GID = 65534;
const STDERR_TAIL = 16 * 1024;

export interface SandboxBinaries {
  workerd: string;
  bwrap: string;
}

/** Why a process did not come up: the loader's output (a script error) or a timeout. */
export class SandboxStartError extends Error {
  constructor(
    message: string,
    /** What workerd and bwrap printed (the end of it). */
    readonly stderr: string,
    readonly timedOut: boolean,
  ) {
    super(message);
    this.name = 'SandboxStartError';
  }
}

/** bwrap's arguments: the sandbox above, then workerd serving the deploy directory's config. */
export function bwrapArgs(binaries: SandboxBinaries, deployDir: string): string[] {
  const ro = (from: string, to = from) => ['--ro-bind', from, to];
  const roTry = (from: string) => ['--ro-bind-try', from, from];
  return [
    '--unshare-all',
    '--die-with-parent',
    '--new-session',
    '--as-pid-1',
    ...['--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_GID)],
    ...['--cap-drop', 'ALL'],
    '--clearenv',
    ...roTry('/lib'),
    ...roTry('/lib64'),
    ...roTry('/usr/lib'),
    ...roTry('/usr/lib64'),
    ...roTry('/etc/ssl'),
    ...roTry('/usr/share/ca-certificates'),
    ...ro(binaries.workerd, '/app/workerd'),
    ...ro(deployDir, SANDBOX_CONFIG_DIR),
    ...['--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp'],
    ...['--chdir', SANDBOX_CONFIG_DIR, '--info-fd', '5'],
    '/app/workerd',
    'serve',
    `${SANDBOX_CONFIG_DIR}/${CONFIG_FILE}`,
    ...['--socket-fd', 'http=3', '--control-fd', '4'],
  ];
}

/** A listening socket on a free loopback port, and its fd for the child. Close the server once the child has it. */
async function listeningSocket(): Promise<{ server: net.Server; port: number; fd: number }> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, backlog: 1024 }, resolve);
  });
  const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) {
    server.close();
    throw new Error('cannot get the listening socket’s file descriptor from Node');
  }
  return { server, port: (server.address() as net.AddressInfo).port, fd };
}

/** The parent's end of the child's fd `n` (a pipe of `stdio`). */
const extraFd = (child: ChildProcess, n: number) => (child.stdio as unknown as Array<NodeJS.ReadableStream | null>)[n] ?? null;

/** One JSON object per line (workerd's control fd), one callback per object. */
function onJsonLines(stream: NodeJS.ReadableStream | null, each: (value: Record<string, unknown>) => void): void {
  let buffer = '';
  stream?.on('data', (chunk: Buffer) => {
    buffer += chunk.toString('utf8');
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      let value: Record<string, unknown> | null = null;
      try {
        value = JSON.parse(line) as Record<string, unknown>;
      } catch {
        // a line that is not an event: ignored
      }
      if (value) each(value);
    }
  });
  stream?.on('error', () => undefined);
}

/** One pretty-printed JSON object (bwrap's info fd): parsed once it is whole. */
function onJsonObject(stream: NodeJS.ReadableStream | null, then: (value: Record<string, unknown>) => void): void {
  let buffer = '';
  let done = false;
  stream?.on('data', (chunk: Buffer) => {
    if (done) return;
    buffer += chunk.toString('utf8');
    try {
      const value = JSON.parse(buffer) as Record<string, unknown>;
      done = true;
      then(value);
    } catch {
      // not whole yet
    }
  });
  stream?.on('error', () => undefined);
}

/**
 * A running sandbox. `inflight` is kept by the proxy (the requests sent to it and not yet
 * answered), so a retired process is stopped only once its last request is done.
 */
export class Sandbox {
  inflight = 0;
  /** A liveness probe after a timeout is under way (providers/workerd/runtime.ts). */
  probing = false;
  /** Keep-alive connections to this process only: dropped with it. */
  readonly agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  private stderrTail = '';
  private exitedAt: number | null = null;
  private idleWaiters: Array<() => void> = [];

  private constructor(
    readonly deployment: Deployment,
    readonly port: number,
    readonly child: ChildProcess,
    /** Resolves once bwrap has exited and its pipes are closed. */
    readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>,
  ) {
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL);
    });
    child.once('exit', () => (this.exitedAt = Date.now()));
  }

  /** workerd's pid on the host (from bwrap's info fd), once known. */
  workerdPid: number | null = null;

  get alive(): boolean {
    return this.exitedAt === null;
  }

  get stderr(): string {
    return this.stderrTail;
  }

  /**
   * Starts workerd in a sandbox on `deployment` and resolves once the router answers (after the
   * config loaded and the socket listens). Rejects with SandboxStartError when workerd exits first
   * (the loader's message is in `stderr`) or does not answer within `timeoutMs`; nothing is left running then.
   */
  static async start(binaries: SandboxBinaries, deployment: Deployment, timeoutMs: number): Promise<Sandbox> {
    const { server, port, fd } = await listeningSocket();
    let child: ChildProcess;
    try {
      const asNobody = process.getuid?.() === 0 ? { uid: SANDBOX_UID, gid: SANDBOX_GID } : {};
      child = spawn(binaries.bwrap, bwrapArgs(binaries, deployment.dir), {
        ...asNobody,
        env: {},
        cwd: '/',
        // stdout: what the functions log with console.log (nobody reads it); stderr: kept for errors.
        stdio: ['ignore', 'ignore', 'pipe', fd, 'pipe', 'pipe'],
      });
    } finally {
      // The child holds its own copy now; Node must never accept on it.
      server.close();
    }
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      child.once('error', () => resolve({ code: null, signal: null }));
      child.once('close', (code, signal) => resolve({ code, signal }));
    });
    const sandbox = new Sandbox(deployment, port, child, exited);
    onJsonObject(extraFd(child, 5), (info) => {
      if (typeof info['child-pid'] === 'number') sandbox.workerdPid = info['child-pid'];
    });
    try {
      await sandbox.waitListening(timeoutMs);
      await sandbox.probe(Math.max(1_000, timeoutMs));
      return sandbox;
    } catch (err) {
      sandbox.kill();
      await exited;
      if (err instanceof SandboxStartError) throw new SandboxStartError(err.message, sandbox.stderr, err.timedOut);
      throw err;
    }
  }

  /** Resolves on workerd's `listen` event; rejects when the process exits first or the time is up. */
  private waitListening(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new SandboxStartError(`workerd did not start within ${timeoutMs} ms`, '', true)), timeoutMs);
      onJsonLines(extraFd(this.child, 4), (event) => {
        if (event.event !== 'listen') return;
        clearTimeout(timer);
        resolve();
      });
      void this.exited.then(({ code, signal }) => {
        clearTimeout(timer);
        reject(new SandboxStartError(`workerd exited (${signal ?? code}) before it served`, '', false));
      });
    });
  }

  /**
   * One request to the router with no function named: it answers 404 with its marker when the
   * process serves. Rejects otherwise (also when nothing answers within `timeoutMs`).
   */
  probe(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: this.port, path: '/', method: 'GET', agent: this.agent, timeout: timeoutMs }, (res) => {
        res.resume();
        const ok = res.statusCode === 404 && res.headers[STATUS_HEADER] === `${this.deployment.marker} missing`;
        res.once('end', () => (ok ? resolve() : reject(new SandboxStartError(`the router answered ${res.statusCode}`, '', false))));
      });
      req.once('timeout', () => req.destroy(new SandboxStartError(`workerd did not answer within ${timeoutMs} ms`, '', true)));
      req.once('error', (err) => reject(err instanceof SandboxStartError ? err : new SandboxStartError(`workerd did not answer: ${err.message}`, '', false)));
      req.end();
    });
  }

  /** Resolves once no request sent to it is in flight (or after `timeoutMs`). */
  idle(timeoutMs: number): Promise<void> {
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.idleWaiters.push(done);
    });
  }

  /** Called by the proxy when a request to it is over. */
  requestDone(): void {
    this.inflight -= 1;
    if (this.inflight > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /**
   * Stops it gracefully: its idle connections closed, SIGTERM to workerd (which finishes what it
   * serves and exits), SIGKILL after `graceMs`. Resolves once bwrap has exited.
   */
  async stop(graceMs: number): Promise<void> {
    this.agent.destroy();
    if (!this.alive) return void (await this.exited);
    if (this.workerdPid) {
      try {
        process.kill(this.workerdPid, 'SIGTERM');
      } catch {
        // already gone
      }
    } else {
      this.kill();
    }
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** SIGKILL to workerd and bwrap (bwrap's death alone would also end workerd: --die-with-parent). */
  kill(): void {
    this.agent.destroy();
    if (!this.alive) return;
    for (const pid of [this.workerdPid, this.child.pid]) {
      if (!pid) continue;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}
