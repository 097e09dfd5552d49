import type { Knex } from 'knex';
import { formatId, parseNumericId } from '../../common/ids';
import { notFound } from '../errors';
import { whereVisibleService, type Principal } from '../principal';
import { findVisibleService, type ServiceRow } from '../services';

/**
 * Container apps' records and the only SQL on their tables (db/migrations/20261126000400_caas.ts).
 * A service (`caas-starter`) holds apps; an app is `app_<n>`, a deployment `dep_<ulid>`.
 */
export interface CaasServiceRow {
  service_id: number;
  ip: string;
  ingress_url: string;
  created_at: Date;
}

export interface CaasTarget {
  service: ServiceRow;
  /** Null while the order that creates it is still building it. */
  space: CaasServiceRow | null;
}

export type AppStatus = 'idle' | 'deploying' | 'running' | 'failed';

export interface AppRow {
  id: number;
  service_id: number;
  name: string;
  source: { type: 'archive'; url: string } | null;
  status: AppStatus;
  current_deployment_id: string | null;
  default_host: string;
  created_at: Date;
  updated_at: Date;
}

export type DeploymentStatus = 'pending' | 'building' | 'starting' | 'active' | 'superseded' | 'failed';

export interface DeploymentRow {
  id: string;
  app_id: number;
  service_id: number;
  operation_id: string | null;
  status: DeploymentStatus;
  source_sha256: string | null;
  error_code: string | null;
  error_message: string | null;
  host_port: number | null;
  created_at: Date;
  finished_at: Date | null;
}

export const appRef = (id: number) => formatId('app', id);

const appOf = (row: Record<string, unknown>): AppRow => ({ ...(row as unknown as AppRow), id: Number(row.id), service_id: Number(row.service_id) });

export async function findVisibleCaas(db: Knex, principal: Principal, rawId: string): Promise<CaasTarget> {
  const service = await findVisibleService(db, principal, rawId, 'caas');
  return { service, space: await findSpace(db, service.id) };
}

export async function findSpace(db: Knex | Knex.Transaction, serviceId: number): Promise<CaasServiceRow | null> {
  const row = await db('caas_services').where({ service_id: serviceId }).first();
  return row ? { ...row, service_id: Number(row.service_id) } : null;
}

/** The caas services the principal sees (for keysetPage). */
export function visibleCaasQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('services')
    .leftJoin('caas_services', 'caas_services.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'caas' })
    .select('services.*', 'caas_services.ip as caas_ip', 'caas_services.ingress_url as caas_ingress_url');
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

/** An app of the service by its public id; 404 otherwise (another service's app too). */
export async function findApp(db: Knex | Knex.Transaction, serviceId: number, rawId: string, forUpdate = false): Promise<AppRow> {
  const id = parseNumericId('app', rawId);
  if (id === null) throw notFound('app');
  const qb = db('caas_apps').where({ id, service_id: serviceId });
  if (forUpdate) qb.forUpdate();
  const row = await qb.first();
  if (!row) throw notFound('app');
  return appOf(row);
}

export async function appById(db: Knex | Knex.Transaction, id: number): Promise<AppRow | null> {
  const row = await db('caas_apps').where({ id }).first();
  return row ? appOf(row) : null;
}

export async function findDeployment(db: Knex | Knex.Transaction, id: string): Promise<DeploymentRow | null> {
  const row = await db('caas_deployments').where({ id }).first();
  return row ? { ...row, app_id: Number(row.app_id), service_id: Number(row.service_id) } : null;
}

/** The app's host names: its default host and its domains. */
export async function hostsOf(db: Knex | Knex.Transaction, app: Pick<AppRow, 'id' | 'default_host'>): Promise<string[]> {
  const rows: Array<{ host: string }> = await db('caas_domains').where({ app_id: app.id }).orderBy('host').select('host');
  return [app.default_host, ...rows.map((r) => r.host)];
}

/** Adds a build or platform line to the app's log. */
export async function addLog(
  db: Knex | Knex.Transaction,
  appId: number,
  deploymentId: string | null,
  source: 'build' | 'platform',
  messages: string[],
): Promise<void> {
  if (messages.length === 0) return;
  await db('caas_logs').insert(messages.map((message) => ({ app_id: appId, deployment_id: deploymentId, source, message: message.slice(0, 4_000) })));
}
