import type { ChildProcess } from 'node:child_process';
import type net from 'node:net';

/**
 * The kv primitive on several processes (SERVERLESS_KV_PROCESSES): one Node process is the limit of
 * kv requests per second (its CPU per request: docs/benchmarks.md "Serverless primitives"), while
 * the other primitives keep state in the main process (the functions' workerd sandboxes are its
 * children; the SQLite engine's workers and files; the reaper). So the main process accepts every
 * connection and reads its first bytes: a connection whose first request is for `/kv/...` goes, in
 * turn, to the main process or to one of its kv helper processes (the socket itself, passed over
 * IPC with the bytes already read); any other connection stays in the main process. A helper serves
 * kv with its own Redis connections, token cache and usage meter (counts are summed in PostgreSQL,
 * as every process's are); a request for another primitive that reaches it on a kv connection (one
 * client using one connection for several primitives) is passed on to the main process over HTTP.
 */

/** Whether the first bytes of a connection start a request for the kv primitive (`<METHOD> /kv/`). */
export function isKvRequestHead(head: Buffer): boolean {
  const space = head.indexOf(0x20);
  return space > 0 && space <= 16 && head.toString('latin1', space + 1, space + 5) === '/kv/';
}

/** What a helper is told: a connection, with the bytes the main process read from it. */
interface HandedConnection {
  type: 'kv-connection';
  head: string;
}

interface Helper {
  child: ChildProcess;
  ready: boolean;
}

export interface KvHelperPoolOptions {
  /** Helper processes to keep (SERVERLESS_KV_PROCESSES - 1). */
  count: number;
  /** Starts one helper; it says `{type: 'ready'}` once it takes connections (`adoptHandedConnections`). */
  spawn(): ChildProcess;
  onError?: (err: Error) => void;
  /** How long after a helper's unexpected exit another is started (default 1 s). */
  restartMs?: number;
}

/** The main process's kv helpers: started, started again when one exits, handed kv connections in turn. */
export class KvHelperPool {
  private readonly helpers: Helper[] = [];
  private turn = 0;
  private closing = false;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly options: KvHelperPoolOptions) {}

  start(): void {
    for (let i = 0; i < this.options.count; i++) this.add();
  }

  /** The helpers' process ids (benchmarks). */
  pids(): number[] {
    return this.helpers.map((h) => h.child.pid).filter((p): p is number => p !== undefined);
  }

  /** Resolves once every helper is ready (or after `ms`). */
  async ready(ms = 30_000): Promise<void> {
    for (const until = Date.now() + ms; Date.now() < until && this.helpers.some((h) => !h.ready);) await new Promise((r) => setTimeout(r, 20));
  }

  /**
   * Gives the connection to a helper when it is a helper's turn (the main process has one turn in
   * every `count + 1`) and that helper is ready; false when the main process is to serve it.
   */
  take(socket: net.Socket, head: Buffer): boolean {
    const slot = this.turn++ % (this.helpers.length + 1);
    const helper = this.helpers[slot];
    if (!helper || !helper.ready || !helper.child.connected) return false;
    // Nothing more is read here: what the kernel receives from now on is the helper's to read.
    const handle = (socket as unknown as { _handle?: { readStop?(): number; reading?: boolean } })._handle;
    if (!handle?.readStop) return false;
    handle.readStop();
    handle.reading = false;
    const message: HandedConnection = { type: 'kv-connection', head: head.toString('latin1') };
    helper.child.send(message, socket, { keepOpen: false }, (err) => {
      if (err) {
        this.options.onError?.(err);
        socket.destroy();
      }
    });
    return true;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.timers) clearTimeout(t);
    await Promise.all(
      this.helpers.map(
        ({ child }) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            if (child.connected) child.send({ type: 'stop' });
            else child.kill('SIGTERM');
          }),
      ),
    );
  }

  private add(): void {
    const child = this.options.spawn();
    const helper: Helper = { child, ready: false };
    this.helpers.push(helper);
    child.on('message', (m: { type?: string }) => {
      if (m?.type === 'ready') helper.ready = true;
    });
    child.on('error', (err) => this.options.onError?.(err));
    child.once('exit', (code, signal) => {
      this.helpers.splice(this.helpers.indexOf(helper), 1);
      if (this.closing) return;
      this.options.onError?.(new Error(`a kv helper process exited (${signal ?? code}); another starts`));
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        if (!this.closing) this.add();
      }, this.options.restartMs ?? 1_000);
      this.timers.add(timer);
    });
  }
}

/**
 * In a helper: connections the main process hands over go to `serve` with the bytes it already
 * read, as if this process had accepted them. Returns the listener (to remove it).
 */
export function adoptHandedConnections(serve: (socket: net.Socket, head: Buffer) => void): (message: unknown, socket: unknown) => void {
  const onMessage = (message: unknown, socket: unknown) => {
    if ((message as Partial<HandedConnection>)?.type !== 'kv-connection' || !socket) return;
    const s = socket as net.Socket;
    serve(s, Buffer.from((message as HandedConnection).head, 'latin1'));
    s.resume();
  };
  process.on('message', onMessage);
  return onMessage;
}
