import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import type { TemporalGateway } from '../../infra/temporal';
import type { KvStore } from '../../providers/kv.provider';
import type { SqlDbEngine } from '../../providers/sqldb.provider';
import type { FunctionsRuntime } from '../../providers/functions.provider';
import { planOf, PRIMITIVES, type PlanSettings, type Primitive, type ServerlessPlan } from '../../domain/serverless/plans';
import type { LiveTenant } from '../../domain/serverless/store';
import { DataPlaneError, errorBody, sendError } from '../errors';
import { CronPlane } from './cron';
import { DbPlane } from './db';
import { FunctionsPlane } from './functions';
import { asDataPlaneError, bodyWithin, isPlainTarget, notFound, parseTarget, PlaneCall, type Call } from './http';
import { KvPlane } from './kv';
import { UsageMeter } from './meter';
import { servePlainHttp, type PlainHttpConnection, type PlainRequest, type PlainResponse } from './plain-http';
import { adoptHandedConnections, isKvRequestHead, type KvHelperPool } from './processes';
import { Reaper } from './reaper';
import { TenantDirectory } from './tenants';

export interface ServerlessDataPlaneOptions {
  db: Knex;
  keyring: Keyring;
  temporal: TemporalGateway;
  plans: PlanSettings;
  allowInsecureTargets: boolean;
  /** The primitives' backends (closed with the plane); a primitive whose backend is not given is not served by this process (503). */
  kv?: KvStore;
  sql?: SqlDbEngine;
  functions?: FunctionsRuntime;
  /** How often usage is written (default 1 s) and ended tenants are looked for (default 2 s). */
  flushMs?: number;
  reapMs?: number;
  /** Whether this process removes ended tenants' data (default true; a kv helper process leaves it to the main one). */
  reap?: boolean;
  /**
   * A kv helper process (dataplane/serverless/processes.ts): the main process's internal address,
   * where requests for the primitives this process has no backend for are passed on (not 503).
   */
  forwardTo?: string;
  /** Told of what the client is not (a backend failure, an unexpected error): for the process's log. */
  onError?: (err: Error) => void;
}

/**
 * The serverless primitives' data planes (SPEC "Serverless", DECISIONS "Serverless") in one process
 * of their own (`npm run serverless`), never the control-plane API. Each primitive's `api_endpoint`
 * is `<base>/<primitive>`: `/kv/v1/ns/...`, `/db/v1/ns/...`, `/functions/v1/functions/...` (and the
 * functions' public `/functions/run/...`), `/cron/v1/schedules...`. Every answer carries
 * `X-Request-Id`; errors use the `/v1` envelope. A request is authenticated by a Bearer token of its
 * primitive (dataplane/serverless/tenants.ts), then handled by the primitive's plane with the
 * tenant the token names: the tenant comes from the token, never from the URL.
 */
export class ServerlessDataPlane {
  private server: http.Server | null = null;
  /** The public listener: hands each connection to the kv reader, a kv helper or the HTTP server, by its first request. */
  private front: net.Server | null = null;
  /** Connections the kv reader serves (plain-http.ts). */
  private readonly plain = new Set<PlainHttpConnection>();
  private helpers: KvHelperPool | null = null;
  private adopted: ((message: unknown, socket: unknown) => void) | null = null;
  /** Connections of the front listener that have sent nothing yet. */
  private readonly undecided = new Set<net.Socket>();
  private readonly forwardAgent: http.Agent | null;
  private readonly tenants: TenantDirectory;
  private readonly meter: UsageMeter;
  private readonly reaper: Reaper;
  readonly kv: KvPlane | null;
  readonly sql: DbPlane | null;
  readonly functions: FunctionsPlane | null;
  readonly cron: CronPlane;

  constructor(private readonly options: ServerlessDataPlaneOptions) {
    const onError = options.onError ?? (() => undefined);
    this.tenants = new TenantDirectory(options.db);
    this.meter = new UsageMeter(options.db, options.flushMs ?? 1_000, onError);
    // Plans are fixed for the process (its settings): each slug's is built once, not per request.
    const plans = new Map<string, ServerlessPlan>();
    const planOfTenant = (tenant: LiveTenant) => {
      let plan = plans.get(tenant.plan);
      if (!plan) plans.set(tenant.plan, (plan = planOf(tenant.plan, options.plans)));
      return plan;
    };
    this.kv = options.kv ? new KvPlane({ store: options.kv, meter: this.meter, planOf: planOfTenant }) : null;
    this.sql = options.sql ? new DbPlane({ db: options.db, engine: options.sql, meter: this.meter, planOf: planOfTenant }) : null;
    this.functions = options.functions
      ? new FunctionsPlane({ db: options.db, runtime: options.functions, meter: this.meter, tenants: this.tenants, planOf: planOfTenant })
      : null;
    this.cron = new CronPlane({
      db: options.db,
      keyring: options.keyring,
      temporal: options.temporal,
      plans: options.plans,
      allowInsecureTargets: options.allowInsecureTargets,
    });
    this.reaper = new Reaper({ db: options.db, planes: this, intervalMs: options.reapMs ?? 2_000, onError });
    this.forwardAgent = options.forwardTo ? new http.Agent({ keepAlive: true }) : null;
  }

  /**
   * Serves on `host:port`: a front listener reads each new connection's first bytes and gives it to
   * the kv reader (plain-http.ts) when its first request is for kv, else to the HTTP server, which
   * listens on an internal loopback port (for its timeouts, and where kv helpers pass requests for
   * the other primitives on). With `kvHelpers` (the main process of several: processes.ts) kv
   * connections go in turn to the helpers too.
   */
  async listen(port: number, host = '127.0.0.1', options: { kvHelpers?: (forwardTo: string) => KvHelperPool } = {}): Promise<string> {
    await this.functions?.restoreAll().catch((err) => this.options.onError?.(err));
    const server = this.createServer();
    const internal = await listenOn(server, 0, '127.0.0.1');
    if (options.kvHelpers) {
      this.helpers = options.kvHelpers(urlOf('127.0.0.1', internal.port));
      this.helpers.start();
    }
    this.front = net.createServer((socket) => this.dispatch(socket));
    const address = await listenOn(this.front, port, host);
    this.startBackground();
    return urlOf(host, address.port);
  }

  /**
   * A kv helper process: serves the connections the main process hands over (processes.ts). Its
   * HTTP server also listens on a loopback port of its own, for the server's timeouts.
   */
  async adoptConnections(): Promise<void> {
    const server = this.createServer();
    await listenOn(server, 0, '127.0.0.1');
    this.adopted = adoptHandedConnections((socket, head) => this.serveConnection(socket, head));
    this.startBackground();
  }

  /** The kv helper processes' ids (benchmarks). */
  helperPids(): number[] {
    return this.helpers?.pids() ?? [];
  }

  /** Resolves once the kv helper processes take connections. */
  async helpersReady(): Promise<void> {
    await this.helpers?.ready();
  }

  private createServer(): http.Server {
    this.server = http.createServer((req, res) => void this.route(req, res));
    this.server.keepAliveTimeout = 65_000;
    return this.server;
  }

  private startBackground(): void {
    this.meter.start();
    if (this.options.reap ?? true) this.reaper.start();
  }

  /** A new connection of the front listener: to a kv helper when its first request is for kv and it is a helper's turn, else served here (serveConnection). */
  private dispatch(socket: net.Socket): void {
    // Until its first bytes the connection is nobody's: it goes on an error, or when it sends
    // nothing within the HTTP server's time for a request's head (as the server would close it).
    const onError = () => socket.destroy();
    const onTimeout = () => socket.destroy();
    this.undecided.add(socket);
    socket.once('close', () => this.undecided.delete(socket));
    socket.once('error', onError);
    socket.setTimeout(this.server!.headersTimeout, onTimeout);
    socket.once('data', (head: Buffer) => {
      this.undecided.delete(socket);
      socket.off('error', onError);
      socket.setTimeout(0, onTimeout);
      if (isKvRequestHead(head) && this.helpers?.take(socket, head)) return;
      this.serveConnection(socket, head);
    });
  }

  /** A connection whose first bytes (`head`) were read: kv requests to the kv reader while they are plain, everything else to the HTTP server. */
  private serveConnection(socket: net.Socket, head: Buffer): void {
    if (!this.kv || !isKvRequestHead(head)) return this.toHttpServer(socket, head);
    const server = this.server!;
    const connection = servePlainHttp(socket, head, {
      accepts: (target) => target.startsWith('/kv/') && isPlainTarget(target),
      handle: (request) => this.kvRequest(request),
      handOff: (s, rest) => this.toHttpServer(s, rest),
      keepAliveMs: server.keepAliveTimeout,
      headersTimeoutMs: server.headersTimeout,
      onError: this.options.onError,
    });
    this.plain.add(connection);
    void connection.ended.then(() => this.plain.delete(connection));
  }

  /** Gives a connection to the HTTP server, the bytes already read from it first. */
  private toHttpServer(socket: net.Socket, read: Buffer): void {
    this.server!.emit('connection', socket);
    if (read.length > 0) socket.emit('data', read);
  }

  /** A kv request read by plain-http.ts: as `route` answers it, in that reader's terms. */
  private async kvRequest(request: PlainRequest): Promise<PlainResponse> {
    const requestId = newUlidId('req');
    try {
      const tenant = this.tenants.knownBearer('kv', request.authorization) ?? (await this.tenants.bearer('kv', request.authorization));
      // A plain target (`accepts`): its path split as it is, after `/kv`.
      const query = request.target.indexOf('?');
      const segments = (query < 0 ? request.target : request.target.slice(0, query)).split('/').slice(2);
      const value = await this.kv!.serve(request.method, segments, tenant, (maxBytes) => bodyWithin(request.body, maxBytes));
      if (value === null) return { status: 204, headers: `X-Request-Id: ${requestId}\r\nCache-Control: no-store\r\n` };
      return { status: 200, headers: `X-Request-Id: ${requestId}\r\nContent-Type: application/octet-stream\r\nCache-Control: no-store\r\n`, body: value };
    } catch (err) {
      const answer = this.answerOf(err);
      return {
        status: answer.status,
        headers: `X-Request-Id: ${requestId}\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n`,
        body: errorBody(answer, requestId),
      };
    }
  }

  /** The answer to a failed request: its own, or 503 for what the client is not (logged). */
  private answerOf(err: unknown): DataPlaneError {
    const known = asDataPlaneError(err);
    if (!known) this.options.onError?.(err as Error);
    return known ?? new DataPlaneError(503, 'api_error', 'backend_unavailable', 'The serverless backend is not answering; try again shortly.');
  }

  /** Writes the counted usage now (tests; the plane does it every second). */
  flush(): Promise<void> {
    return this.meter.flush();
  }

  /** Removes the data of tenants whose service ended, now (tests; the plane does it every few seconds). */
  reap(): Promise<void> {
    return this.reaper.pass();
  }

  private async route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const requestId = newUlidId('req');
    try {
      const target = parseTarget(req.url ?? '/');
      const segments = target.segments;
      const primitive = segments[1];
      if (primitive === 'healthz' && segments.length === 2) {
        res.writeHead(200, { 'X-Request-Id': requestId, 'Content-Type': 'text/plain' });
        res.end('ok');
        return;
      }
      if (!PRIMITIVES.includes(primitive as Primitive)) throw notFound('data plane route');
      const plane = this.planeOf(primitive as Primitive);
      if (!plane && this.options.forwardTo) return await this.forward(req, res, requestId);
      if (!plane) throw new DataPlaneError(503, 'api_error', 'backend_unavailable', `This process does not serve the serverless ${primitive} primitive.`);
      if (primitive === 'functions' && segments[2] === 'run') {
        await this.functions!.invoke(new PlaneCall(req, res, requestId, segments.slice(3), target.search), req.url ?? '/');
        return;
      }
      const tenant = await this.tenants.bearer(primitive as Primitive, req.headers.authorization);
      await plane.handle(new PlaneCall(req, res, requestId, segments.slice(2), target.search), tenant);
    } catch (err) {
      const answer = this.answerOf(err);
      // A body the client is still sending is not read: the connection closes after the answer.
      if (!req.complete && !res.headersSent) res.setHeader('Connection', 'close');
      sendError(res, answer, requestId);
    }
  }

  /**
   * A kv helper passes a request for another primitive to the main process (processes.ts) and its
   * answer back, both streamed; the answer is the main process's (its `X-Request-Id`). If the main
   * process does not answer: 503 with this process's request id.
   */
  private forward(req: http.IncomingMessage, res: http.ServerResponse, requestId: string): Promise<void> {
    const target = new URL(this.options.forwardTo!);
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(name)) headers[name] = value;
    return new Promise<void>((resolve) => {
      const upstream = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers, agent: this.forwardAgent! },
        (answer) => {
          const raw: string[] = [];
          for (let i = 0; i < answer.rawHeaders.length; i += 2) {
            if (!HOP_BY_HOP.has(answer.rawHeaders[i].toLowerCase())) raw.push(answer.rawHeaders[i], answer.rawHeaders[i + 1]);
          }
          if (res.destroyed) {
            answer.destroy();
            return resolve();
          }
          res.writeHead(answer.statusCode ?? 502, answer.statusMessage, raw);
          answer.pipe(res);
          answer.once('end', () => resolve());
          answer.once('error', () => {
            res.destroy();
            resolve();
          });
        },
      );
      upstream.once('error', (err) => {
        if (!res.headersSent && !res.destroyed) {
          this.options.onError?.(err);
          if (!req.complete) res.setHeader('Connection', 'close');
          sendError(res, new DataPlaneError(503, 'api_error', 'backend_unavailable', 'The serverless backend is not answering; try again shortly.'), requestId);
        } else res.destroy();
        resolve();
      });
      // The caller went away: so does the request to the main process.
      res.once('close', () => {
        if (!res.writableFinished) upstream.destroy();
        resolve();
      });
      req.pipe(upstream);
    });
  }

  private planeOf(primitive: Primitive): { handle(call: Call, tenant: LiveTenant): Promise<void> } | null {
    switch (primitive) {
      case 'kv':
        return this.kv;
      case 'db':
        return this.sql;
      case 'functions':
        return this.functions;
      case 'cron':
        return this.cron;
    }
  }

  async close(): Promise<void> {
    this.reaper.stop();
    if (this.adopted) process.off('message', this.adopted);
    // The front listener stops accepting; it is closed once the connections it accepted are (the
    // HTTP server's, closed below, and those that never sent a byte, closed here).
    const front = this.front;
    this.front = null;
    const frontClosed = front ? new Promise<void>((resolve) => front.close(() => resolve())) : Promise.resolve();
    for (const socket of this.undecided) socket.destroy();
    for (const connection of this.plain) connection.shutdown();
    await Promise.all([...this.plain].map((c) => c.ended));
    if (this.server) {
      this.server.closeIdleConnections();
      await new Promise<void>((resolve) => this.server!.close(() => resolve()));
      this.server = null;
    }
    await frontClosed;
    await this.helpers?.close();
    this.forwardAgent?.destroy();
    await this.meter.close();
    // The backends it was given end with it (the workerd sandboxes, the Redis connections, the SQLite workers).
    await Promise.all([this.options.kv?.close(), this.options.sql?.close(), this.options.functions?.close()]);
  }
}

function listenOn(server: net.Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

const urlOf = (host: string, port: number) => `http://${host.includes(':') ? `[${host}]` : host}:${port}`;

/** Headers of one hop only (RFC 9110 7.6.1), not passed on. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'upgrade']);
