import type { Knex } from 'knex';
import { formatId } from '../common/ids';
import { conflict } from '../api/errors';
import type { HypervisorProvider, MachineStatus, MachineType } from '../providers/hypervisor.provider';
import { findVisibleService, type ServiceRow } from './services';
import type { Principal } from './principal';

/**
 * The VPS family's control-plane records: which hypervisor machine backs a VPS service
 * (`vps_servers`) and whether a reinstall runs on it. Live figures come from the hypervisor.
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
  const service = await findVisibleService(db, principal, rawId, 'vps');
  const server: VpsServerRow | undefined = await db('vps_servers').where({ service_id: service.id }).first();
  return { service, server: server ?? null };
}

/** The machine behind a VPS, or 409 when there is none yet. */
export function requireMachine(target: VpsTarget): VpsServerRow {
  if (!target.server) throw conflict('This VPS has no machine on the hypervisor yet; try again once it is provisioned.');
  return target.server;
}

export function presentVps(service: ServiceRow, server: VpsServerRow | null, live: MachineStatus | null) {
  return {
    object: 'vps' as const,
    id: formatId('svc', service.id),
    status: service.status,
    hostname: live?.name ?? server?.hostname ?? null,
    os_hostname: live ? live.osHostname : null,
    type: server?.type ?? null,
    node: live?.node ?? server?.node ?? null,
    vmid: server?.vmid ?? null,
    primary_ip: live?.ipv4 ?? service.primary_ip,
    state: live?.state ?? null,
    uptime_seconds: live ? live.uptimeSeconds : null,
    cpu: live ? { cores: live.cpu.cores, usage_percent: live.cpu.usagePercent } : null,
    memory: live ? { used_bytes: live.memory.usedBytes, total_bytes: live.memory.totalBytes } : null,
    disk: live ? { used_bytes: live.disk.usedBytes, total_bytes: live.disk.totalBytes } : null,
    reinstalling: server?.reinstall_operation_id != null,
    capabilities: service.capabilities ?? {},
  };
}

/**
 * Builds the machine of a VPS service on the hypervisor and records it (seed, tests; the family's
 * provisioner would do the same). Idempotent: a service keeps its first machine.
 */
export async function attachVpsMachine(
  db: Knex,
  hypervisor: HypervisorProvider,
  service: Pick<ServiceRow, 'id' | 'label' | 'primary_ip'>,
  spec: { type: MachineType; hostname?: string; cores?: number; memoryMb?: number; diskGb?: number; node?: string; template?: string; os?: string },
): Promise<VpsServerRow> {
  const existing: VpsServerRow | undefined = await db('vps_servers').where({ service_id: service.id }).first();
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
  return db('vps_servers').where({ service_id: service.id }).first();
}
