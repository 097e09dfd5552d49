import type { Knex } from 'knex';
import { FunctionMissingError, ScriptInvalidError, type FunctionsRuntime } from '../../providers/functions.provider';
import type { LiveTenant } from '../../domain/serverless/store';
import type { ServerlessPlan } from '../../domain/serverless/plans';
import { DataPlaneError, readBody } from '../errors';
import { atQuota, methodNotAllowed, nameParam, notFound, sendEmpty, sendJson, type Call } from './http';
import type { UsageMeter } from './meter';
import { requireServing, type TenantDirectory } from './tenants';

export interface FunctionsDeps {
  db: Knex;
  runtime: FunctionsRuntime;
  meter: UsageMeter;
  tenants: TenantDirectory;
  planOf(tenant: LiveTenant): ServerlessPlan;
}

/**
 * The functions data plane (DECISIONS "Serverless", functions, modelled on Workers):
 * `PUT|DELETE /v1/functions/{name}` with the token, the body an ES module; and each function's
 * public `url` (`{api_endpoint}/run/{tenant handle}/{name}`), where `{url}/...` reaches the function
 * with the rest of the path. The module is kept in PostgreSQL (a restart of the plane deploys every
 * tenant's functions again) and served by the tenant's workerd process (providers/workerd).
 * Invocations, errors (uncaught exceptions, timeouts) and wall-clock execution time are metered;
 * at a hard cap invocations answer 429.
 */
export class FunctionsPlane {
  /** One deploy per tenant at a time: a deploy replaces the tenant's process with its whole set. */
  private readonly deploying = new Map<string, Promise<unknown>>();

  constructor(private readonly deps: FunctionsDeps) {}

  async handle(call: Call, tenant: LiveTenant): Promise<void> {
    const [v1, word, nameSegment, ...rest] = call.segments;
    if (v1 !== 'v1' || word !== 'functions' || nameSegment === undefined || rest.length > 0) throw notFound('functions route');
    const name = nameParam(nameSegment, 'name');
    if (call.req.method === 'PUT') return this.serialised(tenant.handle, () => this.deploy(call, tenant, name));
    if (call.req.method === 'DELETE') return this.serialised(tenant.handle, () => this.remove(call, tenant, name));
    throw methodNotAllowed();
  }

  private async serialised<T>(handle: string, fn: () => Promise<T>): Promise<T> {
    const before = this.deploying.get(handle) ?? Promise.resolve();
    const mine = before.catch(() => undefined).then(fn);
    this.deploying.set(handle, mine);
    try {
      return await mine;
    } finally {
      if (this.deploying.get(handle) === mine) this.deploying.delete(handle);
    }
  }

  private async deploy(call: Call, tenant: LiveTenant, name: string): Promise<void> {
    const plan = this.deps.planOf(tenant);
    const code = (await readBody(call.req, plan.limits.max_script_bytes)).toString('utf8');
    const { db, runtime } = this.deps;
    const existing = await db('serverless_functions').where({ service_id: tenant.service_id, name }).first('name');
    if (!existing) {
      const [{ n }] = await db('serverless_functions').where({ service_id: tenant.service_id }).count({ n: '*' });
      if (Number(n) >= plan.limits.max_functions)
        throw new DataPlaneError(429, 'rate_limit_error', 'quota_exceeded', `The plan allows ${plan.limits.max_functions} functions; delete one first.`);
    }
    try {
      await runtime.deploy(tenant.handle, name, code);
    } catch (err) {
      if (err instanceof ScriptInvalidError)
        throw new DataPlaneError(400, 'invalid_request_error', 'script_invalid', `The module does not load: ${(err as Error).message}`, 'body');
      throw err;
    }
    const [row] = await db('serverless_functions')
      .insert({ service_id: tenant.service_id, name, code, deployed_at: db.fn.now() })
      .onConflict(['service_id', 'name'])
      .merge()
      .returning('deployed_at');
    sendJson(call, existing ? 200 : 201, {
      object: 'function',
      name,
      url: `${tenant.api_endpoint}/run/${tenant.handle}/${name}`,
      deployed_at: new Date(row.deployed_at).toISOString(),
    });
  }

  private async remove(call: Call, tenant: LiveTenant, name: string): Promise<void> {
    const n = await this.deps.db('serverless_functions').where({ service_id: tenant.service_id, name }).delete();
    if (n === 0) throw notFound('function');
    await this.deps.runtime.remove(tenant.handle, name);
    sendEmpty(call);
  }

  /** `/run/{handle}/{name}/...`: public, no token. */
  async invoke(call: Call, rawPath: string): Promise<void> {
    const [handle, nameSegment] = call.segments;
    const tenant = handle ? await this.deps.tenants.byHandle('functions', handle) : null;
    if (!tenant || !nameSegment) throw notFound('function');
    let name: string;
    try {
      name = nameParam(nameSegment, 'name');
    } catch {
      throw notFound('function');
    }
    requireServing(tenant);
    if (!this.deps.runtime.has(tenant.handle, name)) throw notFound('function');
    if (await this.deps.meter.atCap(tenant.service_id, this.deps.planOf(tenant))) throw atQuota('function invocations');
    const prefix = `/run/${handle}/${nameSegment}`;
    const rest = rawPath.slice(rawPath.indexOf(prefix) + prefix.length) || '/';
    // A caller who hung up during the lookups above is not sent on to the function.
    if (call.req.destroyed || call.res.destroyed) return;
    // The function's own answer, with the data plane's request id (DECISIONS: on every answer).
    call.res.setHeader('X-Request-Id', call.requestId);
    let result;
    try {
      result = await this.deps.runtime.invoke(tenant.handle, name, rest.startsWith('/') || rest.startsWith('?') ? rest : `/${rest}`, call.req, call.res);
    } catch (err) {
      if (err instanceof FunctionMissingError) throw notFound('function');
      throw err;
    }
    this.deps.meter.add(tenant.service_id, { invocations: 1, errors: result.errored ? 1 : 0, execution_ms: result.ms });
  }

  /** After a restart: every live tenant's functions as stored. */
  async restoreAll(): Promise<void> {
    const rows: Array<{ handle: string; name: string; code: string }> = await this.deps
      .db('serverless_functions as f')
      .join('serverless_tenants as t', 't.service_id', 'f.service_id')
      .join('services as s', 's.id', 'f.service_id')
      .whereNotIn('s.status', ['terminated', 'cancelled', 'fraud'])
      .select('t.handle', 'f.name', 'f.code');
    const byTenant = new Map<string, Array<{ name: string; code: string }>>();
    for (const r of rows) byTenant.set(r.handle, [...(byTenant.get(r.handle) ?? []), { name: r.name, code: r.code }]);
    // One tenant's set that no longer loads (or a sandbox that does not start) does not keep the others down.
    const failures: Error[] = [];
    for (const [handle, functions] of byTenant) await this.deps.runtime.restore(handle, functions).catch((err: Error) => failures.push(err));
    if (failures.length) throw new Error(`${failures.length} tenants' functions could not be restored: ${failures.map((e) => e.message).join('; ')}`);
  }

  async drop(handle: string): Promise<void> {
    await this.deps.runtime.dropTenant(handle);
  }
}
