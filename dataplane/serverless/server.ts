import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import type { TemporalGateway } from '../../infra/temporal';
import type { KvStore } from '../../providers/kv.provider';
import type { SqlDbEngine } from '../../providers/sqldb.provider';
import type { FunctionsRuntime } from '../../providers/functions.provider';
import { planOf, PRIMITIVES, type PlanSettings, type Primitive } from '../../domain/serverless/plans';
import type { LiveTenant } from '../../domain/serverless/store';
import { DataPlaneError, sendError } from '../errors';
import { CronPlane } from './cron';
import { DbPlane } from './db';
import { FunctionsPlane } from './functions';
import { asDataPlaneError, notFound, type Call } from './http';
import { KvPlane } from './kv';
import { UsageMeter } from './meter';
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
    const planOfTenant = (tenant: LiveTenant) => planOf(tenant.plan, options.plans);
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
  }

  async listen(port: number, host = '127.0.0.1'): Promise<string> {
    await this.functions?.restoreAll().catch((err) => this.options.onError?.(err));
    this.server = http.createServer((req, res) => void this.route(req, res));
    this.server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, host, resolve);
    });
    this.meter.start();
    this.reaper.start();
    const address = this.server.address() as AddressInfo;
    return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
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
      const url = new URL(req.url ?? '/', 'http://plane');
      const [, primitive, ...segments] = url.pathname.split('/');
      const call: Call = { req, res, requestId, segments, query: url.searchParams };
      if (primitive === 'healthz' && segments.length === 0) {
        res.writeHead(200, { 'X-Request-Id': requestId, 'Content-Type': 'text/plain' });
        res.end('ok');
        return;
      }
      if (!PRIMITIVES.includes(primitive as Primitive)) throw notFound('data plane route');
      const plane = this.planeOf(primitive as Primitive);
      if (!plane) throw new DataPlaneError(503, 'api_error', 'backend_unavailable', `This process does not serve the serverless ${primitive} primitive.`);
      if (primitive === 'functions' && segments[0] === 'run') {
        await this.functions!.invoke({ ...call, segments: segments.slice(1) }, req.url ?? '/');
        return;
      }
      const tenant = await this.tenants.bearer(primitive as Primitive, req.headers.authorization);
      await plane.handle(call, tenant);
    } catch (err) {
      const known = asDataPlaneError(err);
      if (!known) this.options.onError?.(err as Error);
      const answer = known ?? new DataPlaneError(503, 'api_error', 'backend_unavailable', 'The serverless backend is not answering; try again shortly.');
      // A body the client is still sending is not read: the connection closes after the answer.
      if (!req.complete && !res.headersSent) res.setHeader('Connection', 'close');
      sendError(res, answer, requestId);
    }
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
    if (this.server) {
      this.server.closeIdleConnections();
      await new Promise<void>((resolve) => this.server!.close(() => resolve()));
      this.server = null;
    }
    await this.meter.close();
    // The backends it was given end with it (the workerd sandboxes, the Redis connections, the SQLite workers).
    await Promise.all([this.options.kv?.close(), this.options.sql?.close(), this.options.functions?.close()]);
  }
}
