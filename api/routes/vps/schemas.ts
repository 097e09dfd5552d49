import { z } from 'zod';
import { formatId } from '../../../common/ids';
import type { ServiceRow, ServiceStatus } from '../../../domain/services';
import type { VpsServerRow } from '../../../domain/vps/store';
import { BACKUP_MODES, TIMEFRAMES, type BackupVolume, type MachineStatus } from '../../../providers/hypervisor.provider';
import { idParam } from '../../schemas';

/**
 * The VPS family's request and response schemas (one schema: validation, handler types, OpenAPI)
 * and the presenters that build the responses from records and live state.
 */
const nullableNumber = z.number().nullable();

export const VpsSchema = z
  .object({
    object: z.literal('vps'),
    id: z.string(),
    status: z.enum(['active', 'pending', 'suspended', 'terminated', 'cancelled', 'fraud', 'unknown']).meta({ description: 'Billing contract status' }),
    hostname: z.string().nullable().meta({ description: "The machine's name. On qemu a rename reaches the guest OS at its next boot (see `os_hostname`)." }),
    os_hostname: z.string().nullable().meta({
      description: 'Live: the hostname the guest OS runs with; differs from `hostname` on qemu until the next reboot. Null when stopped or not queried.',
    }),
    type: z.enum(['qemu', 'lxc']).nullable(),
    node: z.string().nullable().meta({ description: 'Physical node; informational, changes on migration' }),
    vmid: z.number().int().nullable(),
    primary_ip: z.string().nullable(),
    state: z
      .enum(['running', 'stopped', 'paused', 'unknown'])
      .nullable()
      .meta({ description: 'Live machine state; null in lists and when the hypervisor does not answer' }),
    uptime_seconds: nullableNumber,
    cpu: z.object({ cores: nullableNumber, usage_percent: nullableNumber }).nullable(),
    memory: z.object({ used_bytes: nullableNumber, total_bytes: nullableNumber }).nullable(),
    disk: z.object({ used_bytes: nullableNumber, total_bytes: nullableNumber }).nullable(),
    reinstalling: z.boolean().meta({ description: 'A reinstall runs; power actions, backups, restores and another reinstall get 409 meanwhile' }),
    capabilities: z.record(z.string(), z.boolean()),
  })
  .meta({ id: 'Vps' });

export const VpsConfigSchema = z
  .object({
    object: z.literal('vps_config'),
    vmid: z.number().int().nullable(),
    node: z.string().nullable(),
    type: z.enum(['qemu', 'lxc']),
    cores: nullableNumber,
    memory_mb: nullableNumber,
    boot_disk: z.string().nullable(),
    os_type: z.string().nullable(),
    hostname: z.string().nullable(),
  })
  .meta({ id: 'VpsConfig' });

export const VpsIpSchema = z
  .object({
    object: z.literal('vps_ip'),
    version: z.union([z.literal(4), z.literal(6)]),
    address: z.string().nullable(),
    netmask: z.string().nullable(),
    gateway: z.string().nullable(),
    prefix: z.string().nullable(),
  })
  .meta({ id: 'VpsIp' });

export const VpsTemplateSchema = z
  .object({ object: z.literal('vps_template'), id: z.string(), name: z.string(), type: z.enum(['qemu', 'lxc']), storage: z.string().nullable() })
  .meta({ id: 'VpsTemplate' });

export const VpsMetricsSchema = z
  .object({
    object: z.literal('vps_metrics'),
    timeframe: z.enum(TIMEFRAMES),
    data: z.array(
      z.object({
        time: z.string(),
        cpu_percent: nullableNumber,
        memory_bytes: nullableNumber,
        disk_read_bytes: nullableNumber,
        disk_write_bytes: nullableNumber,
        net_in_bytes: nullableNumber,
        net_out_bytes: nullableNumber,
      }),
    ),
  })
  .meta({ id: 'VpsMetrics' });

export const ConsoleTicketSchema = z
  .object({
    object: z.literal('console_ticket'),
    type: z.enum(['vnc', 'spice']),
    url: z.string().nullable().meta({ description: 'For a browser VNC client; a credential' }),
    file: z.string().nullable().meta({ description: 'remote-viewer file for SPICE; contains the password' }),
    expires_at: z.string(),
  })
  .meta({ id: 'ConsoleTicket' });

export const VpsBackupSchema = z
  .object({
    object: z.literal('vps_backup'),
    id: z.string().meta({ description: '`<storage>:backup/<archive_file_name>`; URL-encode it in paths' }),
    storage: z.string(),
    archive: z.string(),
    mode: z.enum(BACKUP_MODES as [string, ...string[]]),
    size_bytes: z.number(),
    created_at: z.string(),
  })
  .meta({ id: 'VpsBackup' });

export const HOSTNAME_RE = /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$/;

export const idParams = z.object({ id: idParam('svc_1') });
export const backupParams = z.object({
  id: idParam('svc_1'),
  backup_id: z
    .string()
    .min(1)
    .max(512)
    .meta({ example: 'local:backup/vzdump-qemu-101-2026_11_22-10_00_00.vma.zst', description: 'URL-encoded (`local%3Abackup%2Fvzdump-...`)' }),
});

export const PowerBody = z.object({ action: z.enum(['start', 'stop', 'reboot']) }).strict();
export const ReinstallBody = z
  .object({
    template: z.string().min(1).max(255).meta({ description: 'A VpsTemplate id of this VPS' }),
    root_password: z.string().min(10).max(128).meta({ description: 'Never stored in clear, never returned, never logged' }),
  })
  .strict();
export const HostnameBody = z.object({ hostname: z.string().min(1).max(253).regex(HOSTNAME_RE, 'must be a hostname such as web-1.example.com') }).strict();
export const BackupBody = z.object({ mode: z.enum(BACKUP_MODES as [string, ...string[]]).default('snapshot') }).strict();
export const ConsoleBody = z.object({ type: z.enum(['vnc', 'spice']).default('vnc') }).strict();

export function presentVps(service: ServiceRow, server: VpsServerRow | null, live: MachineStatus | null): z.input<typeof VpsSchema> {
  return {
    object: 'vps',
    id: formatId('svc', service.id),
    status: service.status as ServiceStatus,
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

export const presentBackup = (b: BackupVolume): z.input<typeof VpsBackupSchema> => ({
  object: 'vps_backup',
  id: b.volid,
  storage: b.storage,
  archive: b.archive,
  mode: b.mode,
  size_bytes: b.sizeBytes,
  created_at: b.createdAt.toISOString(),
});

/** Newest first, then by id. */
export const backupSortKey = (b: BackupVolume) => `${String(9_999_999_999_999 - b.createdAt.getTime()).padStart(13, '0')}|${b.volid}`;
