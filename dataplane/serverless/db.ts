import type { Knex } from 'knex';
import { NamespaceMissingError, SqlError, SqlParamsError, SqlReadOnlyError, type SqlDbEngine } from '../../providers/sqldb.provider';
import type { LiveTenant } from '../../domain/serverless/store';
import type { ServerlessPlan } from '../../domain/serverless/plans';
import { DataPlaneError, readBody } from '../errors';
import { atQuota, invalid, jsonObject, methodNotAllowed, nameParam, notFound, sendEmpty, sendJson, type Call } from './http';
import type { UsageMeter } from './meter';

const MAX_QUERY_BYTES = 1024 * 1024;

export interface DbDeps {
  db: Knex;
  engine: SqlDbEngine;
  meter: UsageMeter;
  planOf(tenant: LiveTenant): ServerlessPlan;
}

/**
 * The db data plane (DECISIONS "Serverless", db, modelled on D1): `PUT|DELETE /v1/ns/{ns}` (201, or
 * 200 when it exists; 204) and `POST /v1/ns/{ns}/query` `{sql, params?}`. Rows read are the rows
 * returned; rows written are the changes of statements that write (a script's: its total changes);
 * the storage peak is the size of the tenant's files after each write. The namespaces are recorded
 * in PostgreSQL (`GET /v1/serverless/db` lists them). On a hard-capped plan at quota, statements
 * that write are refused (429) and reads go on.
 */
export class DbPlane {
  constructor(private readonly deps: DbDeps) {}

  async handle(call: Call, tenant: LiveTenant): Promise<void> {
    const [v1, nsWord, nsSegment, action, ...rest] = call.segments;
    if (v1 !== 'v1' || nsWord !== 'ns' || nsSegment === undefined || rest.length > 0) throw notFound('db route');
    const ns = nameParam(nsSegment, 'ns');
    const method = call.req.method;
    if (action === 'query') {
      if (method !== 'POST') throw methodNotAllowed();
      return this.query(call, tenant, ns);
    }
    if (action !== undefined) throw notFound('db route');
    if (method === 'PUT') return this.create(call, tenant, ns);
    if (method === 'DELETE') return this.remove(call, tenant, ns);
    throw methodNotAllowed();
  }

  private async create(call: Call, tenant: LiveTenant, ns: string): Promise<void> {
    const { db, engine } = this.deps;
    const plan = this.deps.planOf(tenant);
    const existing = await db('serverless_db_namespaces').where({ service_id: tenant.service_id, name: ns }).first();
    if (existing) {
      await engine.createNamespace(tenant.handle, ns);
      return sendJson(call, 200, present(ns, existing.created_at));
    }
    if (await this.deps.meter.atCap(tenant.service_id, plan)) throw atQuota('db writes');
    const created = await db.transaction(async (trx) => {
      await trx('serverless_tenants').where({ service_id: tenant.service_id }).forUpdate().first();
      const [{ n }] = await trx('serverless_db_namespaces').where({ service_id: tenant.service_id }).count({ n: '*' });
      const limit = plan.limits.max_namespaces;
      if (Number(n) >= limit) throw new DataPlaneError(429, 'rate_limit_error', 'quota_exceeded', `The plan allows ${limit} namespaces; delete one first.`);
      const [row] = await trx('serverless_db_namespaces')
        .insert({ service_id: tenant.service_id, name: ns })
        .onConflict(['service_id', 'name'])
        .ignore()
        .returning('*');
      // The file is made inside the transaction: if it cannot be, the namespace is not recorded.
      await engine.createNamespace(tenant.handle, ns);
      return row ?? (await trx('serverless_db_namespaces').where({ service_id: tenant.service_id, name: ns }).first());
    });
    sendJson(call, 201, present(ns, created.created_at));
  }

  private async remove(call: Call, tenant: LiveTenant, ns: string): Promise<void> {
    const n = await this.deps.db('serverless_db_namespaces').where({ service_id: tenant.service_id, name: ns }).delete();
    if (n === 0) throw notFound('namespace');
    await this.deps.engine.dropNamespace(tenant.handle, ns);
    sendEmpty(call);
  }

  private async query(call: Call, tenant: LiveTenant, ns: string): Promise<void> {
    const body = jsonObject(await readBody(call.req, MAX_QUERY_BYTES));
    if (typeof body.sql !== 'string' || body.sql.trim() === '') throw invalid('sql', 'is required: a SQL statement, or several (a script)');
    const params = body.params;
    if (params !== undefined && params !== null && typeof params !== 'object') throw invalid('params', 'must be an array (positional) or an object (named)');
    const { engine, meter } = this.deps;
    const plan = this.deps.planOf(tenant);
    const readOnly = await meter.atCap(tenant.service_id, plan);
    const known = await this.deps.db('serverless_db_namespaces').where({ service_id: tenant.service_id, name: ns }).first('name');
    if (!known) throw notFound('namespace');
    let outcome;
    try {
      outcome = await engine.query(tenant.handle, ns, body.sql, (params ?? undefined) as unknown[] | Record<string, unknown> | undefined, { readOnly });
    } catch (err) {
      if (err instanceof NamespaceMissingError) throw notFound('namespace');
      if (err instanceof SqlParamsError) throw invalid(err.param ?? 'params', err.message);
      if (err instanceof SqlReadOnlyError) throw atQuota('db writes');
      if (err instanceof SqlError) throw new DataPlaneError(400, 'invalid_request_error', 'sql_error', err.message);
      throw err;
    }
    const counts: Record<string, number> = { rows_read: outcome.rowsRead, rows_written: outcome.rowsWritten };
    if (outcome.rowsWritten > 0 || outcome.results.length === 0) counts.storage_bytes_peak = await engine.storedBytes(tenant.handle);
    meter.add(tenant.service_id, counts);
    sendJson(call, 200, { results: outcome.results });
  }

  /** Removes an ended tenant's data (the reaper). */
  async drop(handle: string): Promise<void> {
    await this.deps.engine.dropTenant(handle);
  }
}

const present = (name: string, createdAt: Date) => ({ object: 'db_namespace' as const, name, created_at: new Date(createdAt).toISOString() });
