import type { Knex } from 'knex';
import type { HostDirectory } from '../../providers/host-routing';
import { placeIfHosted } from '../hosts/directory';
import { randomBytes } from 'node:crypto';
import { conflict } from '../errors';
import { randomBase62, type Keyring } from '../../common/crypto';
import type { DbConnectionInfo, DbEngine, DbaasProvider } from '../../providers/dbaas.provider';
import { whereVisibleService, type Principal } from '../principal';
import { findVisibleService, type ServiceRow } from '../services';
import { ADMIN_PASSWORD_LENGTH, ADMIN_PASSWORD_PURPOSE, ADMIN_USERNAME } from './secrets';

/**
 * The DBaaS family's control-plane records, and the only SQL on its tables: which backend instance
 * serves a dbaas service (`dbaas_instances`), its engine, its admin user with the sealed admin
 * password, and where clients reach it. Live state comes from the instance.
 */
export interface DbaasInstanceRow {
  service_id: number;
  instance: string;
  engine: DbEngine;
  admin_username: string;
  sealed_admin_password: string;
  host: string | null;
  port: number | null;
  default_database: string | null;
  tls_mode: string | null;
  ca_certificate: string | null;
  /** Set once the instance answered after its creation. */
  ready_at: Date | null;
}

export interface DbaasTarget {
  service: ServiceRow;
  /** Null while the service has no instance yet (being provisioned), or no longer. */
  instance: DbaasInstanceRow | null;
}

/** Which engine a catalog product runs (db/seeds/orders.seed.ts); a product naming MySQL or MariaDB runs MariaDB. */
const ENGINE_OF_PRODUCT: Record<string, DbEngine> = { 'dbaas-postgres-s': 'postgresql', 'dbaas-mysql-s': 'mysql' };

export function engineOfProduct(product: string): DbEngine {
  return ENGINE_OF_PRODUCT[product] ?? (/mysql|maria/i.test(product) ? 'mysql' : 'postgresql');
}

/** A dbaas service the principal may see (404 otherwise, also for services of another family). */
export async function findVisibleDbaas(db: Knex, principal: Principal, rawId: string): Promise<DbaasTarget> {
  const service = await findVisibleService(db, principal, rawId, 'dbaas');
  return { service, instance: await findInstance(db, service.id) };
}

export async function findInstance(db: Knex | Knex.Transaction, serviceId: number): Promise<DbaasInstanceRow | null> {
  const row = await db('dbaas_instances').where({ service_id: serviceId }).first();
  return row ? { ...row, service_id: Number(row.service_id) } : null;
}

/** The instance behind a dbaas service, or 409 while there is none (yet, or any more). */
export function requireInstance(target: DbaasTarget): DbaasInstanceRow {
  if (!target.instance?.ready_at) throw conflict('This database service has no running instance yet; try again once it is provisioned.');
  return target.instance;
}

/** The dbaas services the principal sees, newest first (for keysetPage). */
export function visibleDbaasQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('services').where({ 'services.account_id': principal.accountId, 'services.family': 'dbaas' }).select('services.*');
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

/** The admin password, opened from its sealed form (for the engine, and for POST .../credentials). */
export function adminPassword(keyring: Keyring, row: Pick<DbaasInstanceRow, 'sealed_admin_password'>): string {
  return keyring.decrypt(ADMIN_PASSWORD_PURPOSE, row.sealed_admin_password);
}

/**
 * Claims the instance record of a service once: a fresh instance name (never reused, so a new
 * service can never land on an old service's data) and a generated admin password, sealed before
 * anything else sees it. A second call returns the first claim.
 */
async function claimInstance(db: Knex, keyring: Keyring, serviceId: number, engine: DbEngine): Promise<DbaasInstanceRow> {
  await db('dbaas_instances')
    .insert({
      service_id: serviceId,
      instance: `svc-${serviceId}-${randomBytes(3).toString('hex')}`,
      engine,
      admin_username: ADMIN_USERNAME,
      sealed_admin_password: keyring.encrypt(ADMIN_PASSWORD_PURPOSE, randomBase62(ADMIN_PASSWORD_LENGTH)),
    })
    .onConflict('service_id')
    .ignore();
  return (await findInstance(db, serviceId))!;
}

/** Records how clients reach the instance of a service (after its build, or its move to another host). */
export async function recordConnection(db: Knex, serviceId: number, info: DbConnectionInfo): Promise<void> {
  await db('dbaas_instances')
    .where({ service_id: serviceId })
    .update({
      host: info.host,
      port: info.port,
      default_database: info.database,
      tls_mode: info.tlsMode,
      ca_certificate: info.caCertificate,
      ready_at: db.raw('coalesce(ready_at, now())'),
      updated_at: db.fn.now(),
    });
}

/**
 * Builds (or finds again) the instance of a dbaas service and records how clients reach it
 * (provisioner, seed, dev route). Idempotent: activities retry, and the backend returns the same
 * instance for the same name, with the admin password set to the sealed one.
 */
export async function attachDbaasInstance(
  db: Knex,
  { dbaas, hosts }: { dbaas: DbaasProvider; hosts: HostDirectory },
  keyring: Keyring,
  service: Pick<ServiceRow, 'id' | 'product'>,
  engine: DbEngine = engineOfProduct(service.product ?? ''),
): Promise<DbaasInstanceRow> {
  // On a host first (when instances run on hosts): the calls below run there.
  await placeIfHosted(db, hosts, 'dbaas', service.id);
  const row = await claimInstance(db, keyring, service.id, engine);
  await dbaas.createInstance({
    name: row.instance,
    serviceId: service.id,
    engine: row.engine,
    adminUsername: row.admin_username,
    adminPassword: adminPassword(keyring, row),
  });
  const info = await dbaas.connectionInfo(row.instance);
  await recordConnection(db, service.id, info);
  await db('services').where({ id: service.id }).whereNull('primary_ip').update({ primary_ip: info.host });
  return (await findInstance(db, service.id))!;
}

/**
 * Changes the admin password: on the engine (`onEngine`), then the sealed copy, with the record
 * locked so that two changes cannot cross and the stored copy is never one the engine lacks.
 */
export async function changeAdminPassword(db: Knex, keyring: Keyring, serviceId: number, password: string, onEngine: () => Promise<void>): Promise<void> {
  await db.transaction(async (trx) => {
    await trx('dbaas_instances').where({ service_id: serviceId }).forUpdate().first();
    await onEngine();
    await trx('dbaas_instances')
      .where({ service_id: serviceId })
      .update({ sealed_admin_password: keyring.encrypt(ADMIN_PASSWORD_PURPOSE, password), updated_at: trx.fn.now() });
  });
}

/** Forgets the instance of a terminated service once the backend has destroyed it. */
export async function detachDbaasInstance(db: Knex, serviceId: number): Promise<void> {
  await db('dbaas_instances').where({ service_id: serviceId }).delete();
}
