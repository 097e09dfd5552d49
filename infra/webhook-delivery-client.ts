import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { rootCertificates } from 'node:tls';
import type { LookupFunction } from 'node:net';
import { bareHost, parseTargetUrl, resolveTarget, TargetRejected, type ResolvedAddress, type TargetPolicy } from './webhook-targets';

export interface WebhookPost {
  url: string;
  body: string;
  headers: Record<string, string>;
  timeoutMs: number;
  policy: TargetPolicy;
  /** Extra trusted CA certificates (PEM), added to the system roots (WEBHOOK_EXTRA_CA_FILE). */
  extraCa?: string | null;
  /** Whose connections these are (the webhook): keep-alive sockets are never shared between endpoints. */
  endpoint?: string;
}

export interface WebhookPostResult {
  delivered: boolean;
  /** HTTP status of the answer; null when there was none (refused target, connection error, timeout). */
  status: number | null;
  /** Why the attempt did not count as delivered; null when it did. */
  error: string | null;
  /** The checked address the request went to. */
  address: string | null;
  /**
   * Whether the receiver had its chance: false when the request never left this process (the
   * worker's sockets were all busy), which says nothing about the endpoint's health.
   */
  sent: boolean;
}

/** A checked target: the parsed URL and the addresses its host resolved to, every one allowed. */
export interface CheckedTarget {
  url: URL;
  addresses: ResolvedAddress[];
}

export interface DeliveryClientOptions {
  /** Open sockets (busy or idle) of this process across every endpoint: WEBHOOK_MAX_SOCKETS. */
  maxSockets: number;
  /** Sockets, hence concurrent attempts, per endpoint: WEBHOOK_ENDPOINT_CONCURRENCY. */
  perEndpoint: number;
  /** An idle keep-alive socket is closed after this long (or sooner when the receiver says so). */
  idleMs?: number;
}

const MAX_RESPONSE_BYTES = 64 * 1024;
const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'EAFNOSUPPORT']);

/**
 * The worker's budget of open sockets. A socket holds a permit from connect to close, idle or busy.
 * When none is free, the oldest idle socket of any endpoint is closed to make room; otherwise the
 * connection waits for one (and the attempt's queue bound applies).
 */
class SocketBudget {
  private open = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(
    readonly max: number,
    private readonly closeAnIdleSocket: () => boolean,
  ) {}

  get inUse(): number {
    return this.open;
  }

  get starved(): boolean {
    return this.waiters.length > 0;
  }

  acquire(granted: () => void): void {
    if (this.open < this.max) {
      this.open++;
      granted();
      return;
    }
    this.waiters.push(granted);
    // Its close hands the permit to the waiter.
    this.closeAnIdleSocket();
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.open--;
  }
}

/** Concurrent attempts of one endpoint: its agent never has more requests, hence sockets, than this. */
class Slots {
  private free: number;
  private readonly waiters: Array<() => void> = [];

  constructor(size: number) {
    this.free = size;
  }

  /** Calls `granted` when a slot is free; the returned function withdraws a request not yet granted. */
  take(granted: () => void): () => void {
    if (this.free > 0) {
      this.free--;
      granted();
      return () => undefined;
    }
    this.waiters.push(granted);
    return () => {
      const i = this.waiters.indexOf(granted);
      if (i >= 0) this.waiters.splice(i, 1);
    };
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.free++;
  }
}

type AgentOptions = https.AgentOptions & { lookup?: LookupFunction };

/**
 * A keep-alive agent for one (endpoint, scheme, host, port, checked address): every socket it opens
 * goes to that address (the lookup is pinned), so a pooled connection can never outlive the check
 * that allowed it; a new check that yields another address uses another agent.
 */
function pinnedAgent(isHttps: boolean, options: AgentOptions, budget: SocketBudget) {
  const Base = isHttps ? https.Agent : http.Agent;
  class PinnedAgent extends Base {
    lastUsed = Date.now();
    readonly slots = new Slots(options.maxSockets ?? 1);

    override createConnection(connectOptions: object, callback: (err: Error | null, socket?: Duplex) => void): Duplex | undefined {
      let socket: Duplex | undefined;
      const granted = () => {
        try {
          socket = (Base.prototype as unknown as { createConnection(o: object): Duplex }).createConnection.call(this, connectOptions);
        } catch (err) {
          budget.release();
          callback(err as Error);
          return;
        }
        socket.once('close', () => budget.release());
        callback(null, socket);
      };
      budget.acquire(granted);
      return undefined;
    }

    override keepSocketAlive(socket: Duplex): boolean {
      // Another endpoint is waiting for a socket: close this one rather than keep it idle.
      if (budget.starved) return false;
      // Node's own rule (typed as void): false when the receiver's Keep-Alive hint is too short.
      return (super.keepSocketAlive as (s: Duplex) => boolean | undefined).call(this, socket) !== false;
    }
  }
  return new PinnedAgent(options);
}

type Pinned = ReturnType<typeof pinnedAgent>;

/**
 * Delivery attempts over HTTP(S) for one worker process: keep-alive connections per endpoint and
 * checked address, at most `perEndpoint` sockets per endpoint and `maxSockets` in all, and one
 * deadline for the whole exchange (connect, request, status line, headers and body), so that a
 * receiver that answers slowly or trickles its body cannot hold a socket past it.
 */
export class DeliveryClient {
  private readonly agents = new Map<string, Pinned>();
  private readonly budget: SocketBudget;
  private readonly idleMs: number;
  private lastSweep = Date.now();

  constructor(private readonly options: DeliveryClientOptions) {
    this.idleMs = options.idleMs ?? 4_000;
    this.budget = new SocketBudget(options.maxSockets, () => this.closeAnIdleSocket());
  }

  /** Sockets open now (busy and idle), across every endpoint. */
  get openSockets(): number {
    return this.budget.inUse;
  }

  /**
   * The check made before every attempt (or batch of attempts made together): the URL's form, one
   * resolution of its host, every address allowed. Throws TargetRejected.
   */
  async check(rawUrl: string, policy: TargetPolicy): Promise<CheckedTarget> {
    const url = parseTargetUrl(rawUrl, policy);
    return { url, addresses: await resolveTarget(url, policy) };
  }

  /** One attempt: check the target, then POST to a checked address. */
  async post(req: WebhookPost): Promise<WebhookPostResult> {
    let target: CheckedTarget;
    try {
      target = await this.check(req.url, req.policy);
    } catch (err) {
      if (err instanceof TargetRejected) return { delivered: false, status: null, error: `target refused: ${err.message}`, address: null, sent: true };
      throw err;
    }
    return this.send(target, req);
  }

  /**
   * POSTs to a target checked by `check()`. The addresses are tried in order while connections are
   * refused. Redirects are not followed (a 3xx is a failed attempt).
   */
  async send(target: CheckedTarget, req: WebhookPost): Promise<WebhookPostResult> {
    let result: WebhookPostResult & { retry?: 'next-address' | 'fresh-socket' } = {
      delivered: false,
      status: null,
      error: 'no address',
      address: null,
      sent: true,
    };
    let freshSocketRetries = 1;
    for (let i = 0; i < target.addresses.length;) {
      result = await this.sendOnce(req, target.url, target.addresses[i]);
      if (result.retry === 'fresh-socket' && freshSocketRetries-- > 0) continue;
      if (result.retry !== 'next-address') break;
      i++;
    }
    delete result.retry;
    return result;
  }

  /** Closes every pooled connection (worker shutdown, tests). */
  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }

  private agentFor(req: WebhookPost, url: URL, address: ResolvedAddress): Pinned {
    const isHttps = url.protocol === 'https:';
    const key = `${req.endpoint ?? ''}|${url.protocol}|${url.host}|${address.address}|${req.extraCa ? 'ca' : ''}`;
    let agent = this.agents.get(key);
    if (!agent) {
      this.sweepAgents();
      const pinned: LookupFunction = (_hostname, options, callback) => {
        // Node asks for every address when it races families (autoSelectFamily); give only the checked one.
        if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [address]);
        else callback(null, address.address, address.family);
      };
      agent = pinnedAgent(
        isHttps,
        {
          keepAlive: true,
          maxSockets: this.options.perEndpoint,
          maxFreeSockets: this.options.perEndpoint,
          // Idle sockets close after this (Node also honours a shorter `Keep-Alive: timeout` hint).
          timeout: this.idleMs,
          scheduling: 'lifo',
          lookup: pinned,
          ...(isHttps && req.extraCa ? { ca: [...rootCertificates, req.extraCa] } : {}),
        },
        this.budget,
      );
      this.agents.set(key, agent);
    }
    agent.lastUsed = Date.now();
    return agent;
  }

  /** Agents that have been idle for a while (their sockets closed) are dropped. */
  private sweepAgents(): void {
    const now = Date.now();
    if (now - this.lastSweep < this.idleMs) return;
    this.lastSweep = now;
    for (const [key, agent] of this.agents) {
      const busy = Object.keys(agent.sockets).length + Object.keys(agent.freeSockets).length + Object.keys(agent.requests).length;
      if (busy === 0 && now - agent.lastUsed > 2 * this.idleMs) {
        agent.destroy();
        this.agents.delete(key);
      }
    }
  }

  private closeAnIdleSocket(): boolean {
    for (const agent of this.agents.values()) {
      for (const sockets of Object.values(agent.freeSockets)) {
        const socket = sockets?.find((s) => !s.destroyed);
        if (socket) {
          socket.destroy();
          return true;
        }
      }
    }
    return false;
  }

  private sendOnce(req: WebhookPost, url: URL, address: ResolvedAddress): Promise<WebhookPostResult & { retry?: 'next-address' | 'fresh-socket' }> {
    const isHttps = url.protocol === 'https:';
    const agent = this.agentFor(req, url, address);
    const options: https.RequestOptions = {
      method: 'POST',
      hostname: bareHost(url),
      port: url.port ? Number(url.port) : isHttps ? 443 : 80,
      path: `${url.pathname}${url.search}`,
      headers: { ...req.headers, 'Content-Length': String(Buffer.byteLength(req.body)) },
      agent,
    };
    return new Promise((resolve) => {
      let settled = false;
      let responded = false;
      let request: http.ClientRequest | undefined;
      let deadline: NodeJS.Timeout | undefined;
      let holdsSlot = false;
      const finish = (result: Omit<WebhookPostResult, 'address' | 'sent'> & { sent?: boolean; retry?: 'next-address' | 'fresh-socket' }) => {
        if (settled) return;
        settled = true;
        clearTimeout(queued);
        clearTimeout(deadline);
        withdraw();
        if (holdsSlot) agent.slots.release();
        resolve({ sent: true, ...result, address: address.address });
      };
      // The wait for a slot and a socket (the endpoint's or the worker's limit) is bounded too, and
      // apart from the deadline: it says nothing about the receiver.
      const queued = setTimeout(() => {
        finish({
          delivered: false,
          status: null,
          error: `not sent: no connection to this endpoint became free within ${req.timeoutMs} ms`,
          sent: false,
        });
        request?.destroy();
      }, req.timeoutMs);
      const start = () => {
        const request = (isHttps ? https : http).request(options, (res) => {
          responded = true;
          const status = res.statusCode ?? 0;
          let received = 0;
          const outcome = () => {
            if (status >= 200 && status < 300) return { delivered: true, status, error: null };
            if (status >= 300 && status < 400) {
              const location = typeof res.headers.location === 'string' ? ` to ${res.headers.location.slice(0, 200)}` : '';
              return { delivered: false, status, error: `HTTP ${status}: redirect${location} not followed` };
            }
            return { delivered: false, status, error: `HTTP ${status}${res.statusMessage ? ` ${res.statusMessage}` : ''}` };
          };
          res.on('data', (chunk: Buffer) => {
            received += chunk.length;
            if (received > MAX_RESPONSE_BYTES) {
              // Enough of it: the status counts; the rest is not read and the socket is not reused.
              finish(outcome());
              request.destroy();
            }
          });
          res.on('end', () => finish(outcome()));
          res.on('error', () => undefined);
          res.on('close', () => {
            if (!res.complete)
              finish({ delivered: false, status, error: `connection error: the connection closed before the response ended (HTTP ${status})` });
          });
        });
        request.on('socket', () => {
          clearTimeout(queued);
          // One deadline for the whole exchange: connect, request, status, headers and the whole body.
          deadline = setTimeout(() => {
            finish({
              delivered: false,
              status: null,
              error: responded ? `timed out after ${req.timeoutMs} ms before the response ended` : `timed out after ${req.timeoutMs} ms without a response`,
            });
            request.destroy();
          }, req.timeoutMs);
        });
        request.on('error', (err: NodeJS.ErrnoException) => {
          // A kept-alive connection the receiver closed while it was idle: try once on a fresh one.
          const staleSocket = request.reusedSocket && !responded && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
          finish({
            delivered: false,
            status: null,
            error: `connection error: ${err.message}`.slice(0, 500),
            retry: staleSocket ? 'fresh-socket' : err.code !== undefined && CONNECT_ERRORS.has(err.code) ? 'next-address' : undefined,
          });
        });
        request.end(req.body);
        return request;
      };
      const withdraw = agent.slots.take(() => {
        holdsSlot = true;
        request = start();
      });
    });
  }
}
