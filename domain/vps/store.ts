import type { Knex } from 'knex';
import { conflict } from '../errors';
import type { HypervisorProvider, MachineType } from '../../providers/hypervisor.provider';
import { whereVisibleService, type Principal } from '../principal';
import type { OperationGuard } from '../operations/guards';
import { findVisibleService, type ServiceRead, type ServiceRow } from '../services';

/**
 * The VPS family's control-plane records, and the only SQL on its tables: which hypervisor machine
 * backs a VPS service (`vps_servers`), whether a reinstall runs on it, and the root password a
 * reinstall waits to hand over (`vps_reinstall_secrets`, sealed). Live figures come from the hypervisor.
 */
export interface VpsServerRow {
  service_id: number;
  vmid: number;
  node: string | null;
  type: MachineType;
  hostname: string | null;
  reinstall_operation_id: string | null;
}

export interface VpsTarget {
  service: ServiceRow;
  /** Null while the service has no machine on the hypervisor yet (e.g. still provisioning). */
  server: VpsServerRow | null;
}

/** A VPS the principal may see (404 otherwise, also for services of another family). */
export async function findVisibleVps(db: Knex, principal: Principal, rawId: string): Promise<VpsTarget> {
  return splitVpsRow(await findVisibleService<ServiceRow & Record<string, unknown>>(db, principal, rawId, 'vps', VPS_READ));
}

/** The machine record's columns beside a service row (splitVpsRow takes them apart). */
const MACHINE_COLUMNS = [
  'vps_servers.vmid as vps_vmid',
  'vps_servers.node as vps_node',
  'vps_servers.type as vps_type',
  'vps_servers.hostname as vps_hostname',
  'vps_servers.reinstall_operation_id as vps_reinstall_operation_id',
];

/** One VPS and its machine record in one round trip (findVisibleService's statement with the join). */
const VPS_READ: ServiceRead = {
  name: 'vps-find-visible',
  text:
    `select services.*, ${MACHINE_COLUMNS.join(', ')} from services left join vps_servers on vps_servers.service_id = services.id ` +
    'where services.id = $1 and services.account_id = $2',
};

export async function findServer(db: Knex | Knex.Transaction, serviceId: number): Promise<VpsServerRow | null> {
  return (await db('vps_servers').where({ service_id: serviceId }).first()) ?? null;
}

/** The machine behind a VPS, or 409 when there is none yet. */
export function requireMachine(target: Pick<VpsTarget, 'server'>): VpsServerRow {
  if (!target.server) throw conflict('This VPS has no machine on the hypervisor yet; try again once it is provisioned.');
  return target.server;
}

/** A page of the VPS services the principal sees, newest first, each with its machine record (or null). */
export function visibleVpsQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('services')
    .leftJoin('vps_servers', 'vps_servers.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'vps' })
    .select('services.*', ...MACHINE_COLUMNS);
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

/** Splits a row of visibleVpsQuery into the service and its machine record. */
export function splitVpsRow(row: ServiceRow & Record<string, unknown>): VpsTarget {
  const server: VpsServerRow | null =
    row.vps_vmid == null
      ? null
      : {
          service_id: row.id,
          vmid: Number(row.vps_vmid),
          node: row.vps_node as string | null,
          type: row.vps_type as MachineType,
          hostname: row.vps_hostname as string | null,
          reinstall_operation_id: row.vps_reinstall_operation_id as string | null,
        };
  return { service: row, server };
}

/** Keeps the list's last-known node and hostname current (a migration or a rename elsewhere). */
export async function recordMachinePlacement(db: Knex, serviceId: number, placement: { node: string; hostname: string }): Promise<void> {
  await db('vps_servers').where({ service_id: serviceId }).update({ node: placement.node, hostname: placement.hostname, updated_at: db.fn.now() });
}

export function refuseWhileReinstalling(server: Pick<VpsServerRow, 'reinstall_operation_id'>, what: string): void {
  if (server.reinstall_operation_id) {
    throw conflict(`A reinstall of this VPS is running (operation ${server.reinstall_operation_id}); ${what} is refused until it ends.`);
  }
}

/**
 * The machine record of a VPS, locked (share) and checked in the statement that writes a power,
 * backup or restore operation's row: refused if there is no machine (yet, or any more) or a
 * reinstall started meanwhile. A reinstall's claim (an update) waits for the statement, or the
 * statement for the claim's commit; actions on the same VPS do not wait for each other. The locked
 * row (`vps`: service_id, vmid) gives the workflow its input.
 */
export function machineGuard(serviceId: number, accountId: number, what: string): OperationGuard {
  return {
    name: 'vps',
    table: 'vps_servers',
    key: { column: 'service_id', value: serviceId },
    // Only the account's own machine is locked (the service guard refuses another account's with 404).
    scope: (param) => `exists (select 1 from services where services.id = vps_servers.service_id and services.account_id = ${param(accountId)})`,
    lock: 'share',
    columns: ['service_id', 'vmid', 'reinstall_operation_id'],
    allows: 'reinstall_operation_id is null',
    whenMissing: 'refuses',
    refuse(row) {
      const server = requireMachine({ server: row as VpsServerRow | null });
      refuseWhileReinstalling(server, what);
    },
  };
}

/**
 * Inside the reinstall operation's transaction: flag the VPS as reinstalling (409 if it already is)
 * and keep the sealed root password for the workflow. Both go with the operation row (foreign keys).
 */
export async function claimReinstall(trx: Knex.Transaction, serviceId: number, operationId: string, sealedRootPassword: string): Promise<void> {
  const claimed = await trx('vps_servers')
    .where({ service_id: serviceId })
    .whereNull('reinstall_operation_id')
    .update({ reinstall_operation_id: operationId, updated_at: trx.fn.now() });
  if (claimed === 0) throw conflict('A reinstall of this VPS is already running; a second one is refused until it ends.');
  await trx('vps_reinstall_secrets').insert({ operation_id: operationId, service_id: serviceId, sealed_root_password: sealedRootPassword });
}

/** The sealed root password a reinstall waits to hand over, or null once it is gone. */
export async function sealedRootPassword(db: Knex, operationId: string): Promise<string | null> {
  const row = await db('vps_reinstall_secrets').where({ operation_id: operationId }).first();
  return row?.sealed_root_password ?? null;
}

export async function dropRootPassword(db: Knex, operationId: string): Promise<void> {
  await db('vps_reinstall_secrets').where({ operation_id: operationId }).delete();
}

/** Clears the reinstalling flag of this operation and drops a password that was never used. */
export async function endReinstall(db: Knex, operationId: string): Promise<void> {
  await db.transaction((trx) => releaseReinstall(trx, operationId));
}

/**
 * Gives back what a reinstall's request claimed (the flag, the sealed password): at its end, or when
 * the operation is closed because no workflow ever ran it (the orphan sweeper), so a VPS is never
 * left locked by an operation that will not finish.
 */
export async function releaseReinstall(trx: Knex.Transaction, operationId: string): Promise<void> {
  await trx('vps_servers').where({ reinstall_operation_id: operationId }).update({ reinstall_operation_id: null, updated_at: trx.fn.now() });
  await trx('vps_reinstall_secrets').where({ operation_id: operationId }).delete();
}

export async function recordHostname(db: Knex, serviceId: number, hostname: string): Promise<void> {
  await db('vps_servers').where({ service_id: serviceId }).update({ hostname, updated_at: db.fn.now() });
}

/**
 * Builds the machine of a VPS service on the hypervisor and records it (provisioner, seed, dev
 * route). Idempotent: a service keeps its first machine.
 */
export async function attachVpsMachine(
  db: Knex,
  hypervisor: HypervisorProvider,
  service: Pick<ServiceRow, 'id' | 'label' | 'primary_ip'>,
  spec: { type: MachineType; hostname?: string; cores?: number; memoryMb?: number; diskGb?: number; node?: string; template?: string; os?: string },
): Promise<VpsServerRow> {
  const existing = await findServer(db, service.id);
  if (existing) return existing;
  const machine = await hypervisor.createMachine({
    serviceId: service.id,
    type: spec.type,
    hostname: spec.hostname ?? service.label ?? `vps-${service.id}`,
    cores: spec.cores ?? (spec.type === 'qemu' ? 2 : 1),
    memoryMb: spec.memoryMb ?? (spec.type === 'qemu' ? 2048 : 1024),
    diskGb: spec.diskGb ?? (spec.type === 'qemu' ? 40 : 10),
    node: spec.node,
    template: spec.template,
    os: spec.os,
    ipv4: service.primary_ip ?? undefined,
  });
  await db('vps_servers')
    .insert({ service_id: service.id, vmid: machine.vmid, node: machine.node, type: machine.type, hostname: machine.name })
    .onConflict('service_id')
    .ignore();
  await db('services').where({ id: service.id }).whereNull('primary_ip').update({ primary_ip: machine.ipv4 });
  return (await findServer(db, service.id))!;
}

/** Forgets the machine record of a terminated VPS once its machine is destroyed. */
export async function detachVpsMachine(db: Knex, serviceId: number): Promise<void> {
  await db('vps_servers').where({ service_id: serviceId }).delete();
}
