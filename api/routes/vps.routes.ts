import type { Knex } from 'knex';
import { z } from 'zod';
import { formatId } from '../../common/ids';
import { requireCapability } from '../../domain/services';
import { whereVisibleService, type Principal } from '../../domain/principal';
import { attachVpsMachine, findVisibleVps, presentVps, requireMachine, type VpsServerRow, type VpsTarget } from '../../domain/vps';
import { ROOT_PASSWORD_PURPOSE } from '../../activities/vps.activities';
import {
  BACKUP_ID_PATTERN,
  BACKUP_MODES,
  HypervisorRefusedError,
  TIMEFRAMES,
  UnknownMachineError,
  type BackupVolume,
} from '../../providers/hypervisor.provider';
import { HypervisorSimulator, TASK_KINDS, type TaskKind } from '../../providers/simulator/hypervisor.simulator';
import { liveRead } from '../../providers/errors';
import type { VpsPowerInput } from '../../workflows/vps/vps-power.workflow';
import type { VpsReinstallInput } from '../../workflows/vps/vps-reinstall.workflow';
import type { VpsBackupInput } from '../../workflows/vps/vps-backup.workflow';
import type { VpsRestoreInput } from '../../workflows/vps/vps-restore.workflow';
import type { AppDeps } from '../deps';
import { conflict, notFound, unsupportedForProduct, validationFailed } from '../errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../pagination';
import { defineRoute } from '../route';
import { OperationSchema, idParam, listOf } from '../schemas';

/**
 * Virtual servers (SPEC "VPS"). `{id}` is the VPS service (`svc_<n>`); the machine behind it is
 * found in `vps_servers`. Lists come from the database with live fields null; single reads ask the
 * hypervisor and fall back to null live fields; power, reinstall, backup and restore are operations.
 */
const TAG = 'Virtual servers';

const nullableNumber = z.number().nullable();

export const VpsSchema = z
  .object({
    object: z.literal('vps'),
    id: z.string(),
    status: z.enum(['active', 'pending', 'suspended', 'terminated', 'cancelled', 'fraud', 'unknown']).meta({ description: 'Billing contract status' }),
    hostname: z.string().nullable().meta({ description: 'The machine\'s name. On qemu a rename reaches the guest OS at its next boot (see `os_hostname`).' }),
    os_hostname: z
      .string()
      .nullable()
      .meta({ description: 'Live: the hostname the guest OS runs with; differs from `hostname` on qemu until the next reboot. Null when stopped or not queried.' }),
    type: z.enum(['qemu', 'lxc']).nullable(),
    node: z.string().nullable().meta({ description: 'Physical node; informational, changes on migration' }),
    vmid: z.number().int().nullable(),
    primary_ip: z.string().nullable(),
    state: z.enum(['running', 'stopped', 'paused', 'unknown']).nullable().meta({ description: 'Live machine state; null in lists and when the hypervisor does not answer' }),
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

const HOSTNAME_RE = /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$/;

const idParams = z.object({ id: idParam('svc_1') });
const backupParams = z.object({
  id: idParam('svc_1'),
  backup_id: z.string().min(1).max(512).meta({ example: 'local:backup/vzdump-qemu-101-2026_11_22-10_00_00.vma.zst', description: 'URL-encoded (`local%3Abackup%2Fvzdump-...`)' }),
});

const PowerBody = z.object({ action: z.enum(['start', 'stop', 'reboot']) }).strict();
const ReinstallBody = z
  .object({
    template: z.string().min(1).max(255).meta({ description: 'A VpsTemplate id of this VPS' }),
    root_password: z.string().min(10).max(128).meta({ description: 'Never stored in clear, never returned, never logged' }),
  })
  .strict();
const HostnameBody = z.object({ hostname: z.string().min(1).max(253).regex(HOSTNAME_RE, 'must be a hostname such as web-1.example.com') }).strict();
const BackupBody = z.object({ mode: z.enum(BACKUP_MODES as [string, ...string[]]).default('snapshot') }).strict();
const ConsoleBody = z.object({ type: z.enum(['vnc', 'spice']).default('vnc') }).strict();

/** Reads that need the machine answer 409 while it is not on the hypervisor (yet, or any more). */
const NO_MACHINE = { status: 409, description: 'The VPS has no machine on the hypervisor, yet or any more (`conflict`)' };

/** Hypervisor answers that are not outages: a refusal or a vanished machine is a conflict with the current state. */
async function hv<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof HypervisorRefusedError) throw conflict(err.message);
    if (err instanceof UnknownMachineError) throw conflict('The machine of this VPS is not on the hypervisor any more.');
    throw err;
  }
}

/** A page of a list the hypervisor returns whole, with the same opaque cursors as database lists. */
function pageOfArray<T>(deps: AppDeps, list: string, items: T[], sortKey: (item: T) => string, query: { limit: number; cursor?: string }) {
  const sorted = [...items].sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0));
  let rest = sorted;
  if (query.cursor !== undefined) {
    const after = deps.cursors.decode(list, query.cursor);
    if (typeof after !== 'string') throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
    rest = sorted.filter((item) => sortKey(item) > after);
  }
  const data = rest.slice(0, query.limit);
  const hasMore = rest.length > query.limit;
  return { data, hasMore, nextCursor: hasMore ? deps.cursors.encode(list, sortKey(data[data.length - 1])) : null };
}

const presentBackup = (b: BackupVolume) => ({
  object: 'vps_backup' as const,
  id: b.volid,
  storage: b.storage,
  archive: b.archive,
  mode: b.mode,
  size_bytes: b.sizeBytes,
  created_at: b.createdAt.toISOString(),
});
/** Newest first, then by id. */
const backupSortKey = (b: BackupVolume) => `${String(9_999_999_999_999 - b.createdAt.getTime()).padStart(13, '0')}|${b.volid}`;

function refuseWhileReinstalling(server: VpsServerRow, what: string): void {
  if (server.reinstall_operation_id) {
    throw conflict(`A reinstall of this VPS is running (operation ${server.reinstall_operation_id}); ${what} is refused until it ends.`);
  }
}

/** Inside the operation's transaction: lock the VPS row and refuse if a reinstall started meanwhile. */
async function lockNotReinstalling(trx: Knex.Transaction, serviceId: number, what: string): Promise<void> {
  const row: VpsServerRow | undefined = await trx('vps_servers').where({ service_id: serviceId }).forUpdate().first();
  if (!row) throw conflict('This VPS has no machine on the hypervisor yet.');
  refuseWhileReinstalling(row, what);
}

/** A backup id of this VPS's machine, or 400 (malformed) / 404 (not one of its backups). */
async function findOwnBackup(deps: AppDeps, server: VpsServerRow, backupId: string): Promise<BackupVolume> {
  if (!BACKUP_ID_PATTERN.test(backupId)) {
    throw validationFailed([{ param: 'backup_id', message: 'must look like <storage>:backup/<archive_file_name>, URL-encoded in the path' }]);
  }
  const backups = await hv(() => deps.providers.hypervisor.listBackups(server.vmid));
  const backup = backups.find((b) => b.volid === backupId);
  if (!backup) throw notFound('backup');
  return backup;
}

const resourceOf = (target: VpsTarget) => ({ object: 'vps', id: formatId('svc', target.service.id) });
const accepted = (op: { id: string }) => ({ status: 202, headers: { Location: `/v1/operations/${op.id}` }, body: op });

/** The VPS a power, backup or restore action acts on: a machineTarget not being reinstalled (409 names `what`). */
async function actionTarget(deps: AppDeps, principal: Principal, id: string, capability: string, what: string) {
  const action = await machineTarget(deps, principal, id, capability);
  refuseWhileReinstalling(action.server, what);
  return action;
}

/** A visible VPS whose `capability` is true, with the machine that backs it (409 when it has none yet). */
async function machineTarget(deps: AppDeps, principal: Principal, id: string, capability: string) {
  const target = await findVisibleVps(deps.db, principal, id);
  requireCapability(target.service, capability);
  return { target, server: requireMachine(target) };
}

/** Starts one of those actions' operations; the reinstall lock is checked again in its transaction. */
async function startVpsAction(
  deps: AppDeps,
  principal: Principal,
  { target, server }: { target: VpsTarget; server: VpsServerRow },
  action: { type: string; workflowType: string; what: string; input: Record<string, unknown> },
) {
  const op = await deps.operations.start({
    principal,
    type: action.type,
    workflowType: action.workflowType,
    input: action.input,
    resource: resourceOf(target),
    serviceId: server.service_id,
    initialStatus: 'running',
    inTransaction: (trx) => lockNotReinstalling(trx, server.service_id, action.what),
  });
  return accepted(op);
}

export const vpsRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/vps',
    operationId: 'listVps',
    summary: 'List virtual servers',
    description: 'From the control plane\'s database: `state`, `os_hostname`, `uptime_seconds`, `cpu`, `memory` and `disk` are `null` (read one VPS for live values).',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of VPS, newest first', schema: listOf(VpsSchema, 'VpsList') }],
    async handler({ query, principal, deps }) {
      const qb = deps
        .db('services')
        .leftJoin('vps_servers', 'vps_servers.service_id', 'services.id')
        .where({ 'services.account_id': principal.accountId, 'services.family': 'vps' })
        .select(
          'services.*',
          'vps_servers.vmid as vps_vmid',
          'vps_servers.node as vps_node',
          'vps_servers.type as vps_type',
          'vps_servers.hostname as vps_hostname',
          'vps_servers.reinstall_operation_id as vps_reinstall_operation_id',
        );
      whereVisibleService(qb, principal, 'services.id');
      const page = await keysetPage(qb, { cursors: deps.cursors, list: listFingerprint('vps', {}), column: 'services.id', limit: query.limit, cursor: query.cursor });
      const data = page.rows.map((row) => {
        const server: VpsServerRow | null =
          row.vps_vmid == null
            ? null
            : { service_id: row.id, vmid: row.vps_vmid, node: row.vps_node, type: row.vps_type, hostname: row.vps_hostname, reinstall_operation_id: row.vps_reinstall_operation_id };
        return presentVps(row, server, null);
      });
      return { body: listEnvelope(data, page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}',
    operationId: 'getVps',
    summary: 'Get a virtual server with its live state',
    description: 'Live fields come from the hypervisor; if it does not answer in time they are `null` and the call still succeeds.',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The VPS', schema: VpsSchema }],
    async handler({ params, principal, deps }) {
      const target = await findVisibleVps(deps.db, principal, params.id);
      const { server } = target;
      const live = server ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.hypervisor.status(server.vmid)) : null;
      if (server && live && (live.node !== server.node || live.name !== server.hostname)) {
        // Keep the list's last-known node and hostname current (a migration or a rename elsewhere).
        await deps.db('vps_servers').where({ service_id: server.service_id }).update({ node: live.node, hostname: live.name, updated_at: deps.db.fn.now() });
      }
      return { body: presentVps(target.service, server, live) };
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/v1/vps/{id}',
    operationId: 'updateVps',
    summary: 'Rename a virtual server',
    description:
      'Body `hostname`. On `lxc` the container\'s hostname changes immediately. On `qemu` the VM is renamed now (`hostname`) and the guest OS picks the name up at its next boot: until a reboot, `os_hostname` still shows the old name.',
    tag: TAG,
    scope: 'vps:write',
    credential: 'credential',
    marks: ['R', 'I'],
    params: idParams,
    body: HostnameBody,
    exampleBody: { hostname: 'web-2.example.com' },
    responses: [{ status: 200, description: 'The VPS after the rename', schema: VpsSchema }],
    async handler({ params, body, principal, deps }) {
      const { target, server } = await machineTarget(deps, principal, params.id, 'rename');
      await hv(() => deps.providers.hypervisor.setHostname(server.vmid, body.hostname));
      await deps.db('vps_servers').where({ service_id: server.service_id }).update({ hostname: body.hostname, updated_at: deps.db.fn.now() });
      const live = await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.hypervisor.status(server.vmid));
      return { body: presentVps(target.service, { ...server, hostname: body.hostname }, live) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/config',
    operationId: 'getVpsConfig',
    summary: 'Get the hypervisor configuration of a virtual server',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The configuration', schema: VpsConfigSchema }, NO_MACHINE],
    async handler({ params, principal, deps }) {
      const server = requireMachine(await findVisibleVps(deps.db, principal, params.id));
      const c = await hv(() => deps.providers.hypervisor.config(server.vmid));
      return {
        body: {
          object: 'vps_config',
          vmid: c.vmid,
          node: c.node,
          type: c.type,
          cores: c.cores,
          memory_mb: c.memoryMb,
          boot_disk: c.bootDisk,
          os_type: c.osType,
          hostname: c.hostname,
        },
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/ips',
    operationId: 'listVpsIps',
    summary: 'List the IP addresses of a virtual server',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'IPv4 and IPv6 addresses', schema: listOf(VpsIpSchema, 'VpsIpList') }, NO_MACHINE],
    async handler({ params, query, principal, deps }) {
      const server = requireMachine(await findVisibleVps(deps.db, principal, params.id));
      const ips = await hv(() => deps.providers.hypervisor.ips(server.vmid));
      const page = pageOfArray(deps, listFingerprint(`vps.ips:${server.service_id}`, {}), ips, (ip) => `${ip.version}|${ip.address}`, query);
      return { body: listEnvelope(page.data.map((ip) => ({ object: 'vps_ip', ...ip })), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/templates',
    operationId: 'listVpsTemplates',
    summary: 'List the templates a virtual server can be reinstalled with',
    description: 'Depends on the machine type (`qemu` or `lxc`) and on the node it runs on.',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'Templates', schema: listOf(VpsTemplateSchema, 'VpsTemplateList') }, NO_MACHINE],
    async handler({ params, query, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'templates');
      const templates = await hv(() => deps.providers.hypervisor.templates(server.vmid));
      const page = pageOfArray(deps, listFingerprint(`vps.templates:${server.service_id}`, {}), templates, (t) => t.id, query);
      return { body: listEnvelope(page.data.map((t) => ({ object: 'vps_template', ...t })), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/metrics',
    operationId: 'getVpsMetrics',
    summary: 'Get usage metrics of a virtual server',
    description:
      'Query `timeframe` (default `hour`) selects the period and, with it, the resolution, which is not configurable: `hour` minute points, `day` 30-minute points, `week` 3-hour points, `month` 12-hour points, `year` weekly points. Oldest point first.',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    query: z.object({ timeframe: z.enum(TIMEFRAMES).default('hour') }),
    responses: [{ status: 200, description: 'The metric series', schema: VpsMetricsSchema }, NO_MACHINE],
    async handler({ params, query, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'metrics');
      const points = await hv(() => deps.providers.hypervisor.metrics(server.vmid, query.timeframe));
      return {
        body: {
          object: 'vps_metrics',
          timeframe: query.timeframe,
          data: points.map((p) => ({
            time: p.time,
            cpu_percent: p.cpuPercent,
            memory_bytes: p.memoryBytes,
            disk_read_bytes: p.diskReadBytes,
            disk_write_bytes: p.diskWriteBytes,
            net_in_bytes: p.netInBytes,
            net_out_bytes: p.netOutBytes,
          })),
        },
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/vps/{id}/console',
    operationId: 'createVpsConsoleTicket',
    summary: 'Open a console on a virtual server',
    description:
      'Single-use ticket giving full OS access, bypassing network and SSH. Body `type`: `vnc` (default; `url` for a browser client) or `spice` (qemu only; `file` is a remote-viewer file that contains the password). Never replayed by Idempotency-Key, never cached, never logged.',
    tag: TAG,
    scope: 'vps:console',
    credential: 'credential',
    marks: ['R'],
    returnsSecret: true,
    params: idParams,
    body: ConsoleBody,
    exampleBody: { type: 'vnc' },
    responses: [{ status: 201, description: 'The console ticket', schema: ConsoleTicketSchema }],
    async handler({ params, body, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'console');
      if (body.type === 'spice' && server.type !== 'qemu') throw unsupportedForProduct('console type spice');
      const grant = await hv(() => deps.providers.hypervisor.consoleTicket(server.vmid, body.type));
      return {
        status: 201,
        body: { object: 'console_ticket', type: grant.type, url: grant.url, file: grant.file, expires_at: grant.expiresAt.toISOString() },
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/vps/{id}/power',
    operationId: 'powerVps',
    summary: 'Start, stop or reboot a virtual server',
    description:
      'Body `action`: `start`, `stop` or `reboot`. Answers 202 as soon as the order is issued; the `vps.power` operation succeeds when the machine has reached the state (`reboot`: stop, wait, start, ends `running`). `409 conflict` while a reinstall runs.',
    tag: TAG,
    scope: 'vps:power',
    credential: 'credential',
    marks: ['R', 'A', 'I'],
    params: idParams,
    body: PowerBody,
    exampleBody: { action: 'reboot' },
    responses: [{ status: 202, description: 'The `vps.power` operation', schema: OperationSchema }],
    async handler({ params, body, principal, deps }) {
      const action = await actionTarget(deps, principal, params.id, 'power', 'a power action');
      const input: Omit<VpsPowerInput, 'operationId'> = { serviceId: action.server.service_id, vmid: action.server.vmid, action: body.action };
      return startVpsAction(deps, principal, action, { type: 'vps.power', workflowType: 'vpsPowerWorkflow', what: 'a power action', input: { ...input } });
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/vps/{id}/reinstall',
    operationId: 'reinstallVps',
    summary: 'Reinstall a virtual server from a template',
    description:
      'Body `template` (an id of GET /v1/vps/{id}/templates) and `root_password`. Wipes the whole disk; the IP addresses are kept. The `vps.reinstall` operation reports its stages (`provision`, `boot`, `health_check`) in `progress` and `result.stage`, and may take minutes. `reinstalling` is true until it ends; power actions, backups, restores and a second reinstall get `409 conflict` meanwhile. The password is sealed at rest until the hypervisor has it, then deleted; it appears in no response, log or workflow history.',
    tag: TAG,
    scope: 'vps:write',
    credential: 'credential',
    marks: ['D', 'A', 'I'],
    params: idParams,
    body: ReinstallBody,
    exampleBody: { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'a long and random passphrase' },
    responses: [{ status: 202, description: 'The `vps.reinstall` operation', schema: OperationSchema }],
    async handler({ params, body, principal, deps }) {
      const { target, server } = await machineTarget(deps, principal, params.id, 'reinstall');
      refuseWhileReinstalling(server, 'another reinstall');
      const templates = await hv(() => deps.providers.hypervisor.templates(server.vmid));
      if (!templates.some((t) => t.id === body.template)) {
        throw validationFailed([{ param: 'template', message: 'is not a template of this VPS (see GET /v1/vps/{id}/templates)' }]);
      }
      const input: Omit<VpsReinstallInput, 'operationId'> = { serviceId: server.service_id, vmid: server.vmid, template: body.template };
      const sealed = deps.keyring.encrypt(ROOT_PASSWORD_PURPOSE, body.root_password);
      // If the workflow cannot start, the operation row is taken back, and with it (foreign keys)
      // the flag and the sealed password.
      const op = await deps.operations.start({
          principal,
          type: 'vps.reinstall',
          workflowType: 'vpsReinstallWorkflow',
          input: { ...input },
          resource: resourceOf(target),
          serviceId: server.service_id,
          initialStatus: 'running',
          // The flag and the sealed password are written with the operation row: all or nothing.
          inTransaction: async (trx, operationId) => {
            const claimed = await trx('vps_servers')
              .where({ service_id: server.service_id })
              .whereNull('reinstall_operation_id')
              .update({ reinstall_operation_id: operationId, updated_at: trx.fn.now() });
            if (claimed === 0) throw conflict('A reinstall of this VPS is already running; a second one is refused until it ends.');
            await trx('vps_reinstall_secrets').insert({ operation_id: operationId, service_id: server.service_id, sealed_root_password: sealed });
          },
        });
      return accepted(op);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/backups',
    operationId: 'listVpsBackups',
    summary: 'List the backups of a virtual server',
    description: 'Read from the hypervisor\'s backup storage, newest first. A backup being made appears once it is complete, with its final size.',
    tag: TAG,
    scope: 'vps:read',
    credential: 'credential',
    marks: [],
    params: idParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'Backups', schema: listOf(VpsBackupSchema, 'VpsBackupList') }, NO_MACHINE],
    async handler({ params, query, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'backups');
      const backups = await hv(() => deps.providers.hypervisor.listBackups(server.vmid));
      const page = pageOfArray(deps, listFingerprint(`vps.backups:${server.service_id}`, {}), backups, backupSortKey, query);
      return { body: listEnvelope(page.data.map(presentBackup), page) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/vps/{id}/backups',
    operationId: 'createVpsBackup',
    summary: 'Back up a virtual server',
    description:
      'Body `mode`: `snapshot` (default, the machine keeps running), `suspend` or `stop`. The `vps.backup` operation carries `result.backup_id` once the task is queued and succeeds when the backup appears in the list, with `result.size_bytes`.',
    tag: TAG,
    scope: 'vps:write',
    credential: 'credential',
    marks: ['R', 'A', 'I'],
    params: idParams,
    body: BackupBody,
    exampleBody: { mode: 'snapshot' },
    responses: [{ status: 202, description: 'The `vps.backup` operation', schema: OperationSchema }],
    async handler({ params, body, principal, deps }) {
      const action = await actionTarget(deps, principal, params.id, 'backups', 'a backup');
      const input: Omit<VpsBackupInput, 'operationId'> = {
        serviceId: action.server.service_id,
        vmid: action.server.vmid,
        mode: body.mode as VpsBackupInput['mode'],
      };
      return startVpsAction(deps, principal, action, { type: 'vps.backup', workflowType: 'vpsBackupWorkflow', what: 'a backup', input: { ...input } });
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/vps/{id}/backups/{backup_id}',
    operationId: 'deleteVpsBackup',
    summary: 'Delete a backup of a virtual server',
    description: '`backup_id` contains `:` and `/`: URL-encode it (`local%3Abackup%2Fvzdump-...`). A backup of another VPS is `404`.',
    tag: TAG,
    scope: 'vps:write',
    credential: 'credential',
    marks: ['D', 'I'],
    params: backupParams,
    responses: [{ status: 204, description: 'Deleted' }],
    async handler({ params, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'backups');
      const backup = await findOwnBackup(deps, server, params.backup_id);
      if (!(await hv(() => deps.providers.hypervisor.deleteBackup(backup.volid)))) throw notFound('backup');
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/vps/{id}/backups/{backup_id}/restore',
    operationId: 'restoreVpsBackup',
    summary: 'Restore a backup over a virtual server',
    description:
      'Checks first that the backup belongs to this VPS (`404` otherwise; a malformed id is `400`). The `vps.restore` operation powers the machine off and overwrites its whole disk; the machine is left stopped. `409 conflict` while a reinstall runs.',
    tag: TAG,
    scope: 'vps:write',
    credential: 'credential',
    marks: ['D', 'A', 'I'],
    params: backupParams,
    responses: [{ status: 202, description: 'The `vps.restore` operation', schema: OperationSchema }],
    async handler({ params, principal, deps }) {
      const action = await actionTarget(deps, principal, params.id, 'restore', 'a restore');
      const backup = await findOwnBackup(deps, action.server, params.backup_id);
      const input: Omit<VpsRestoreInput, 'operationId'> = { serviceId: action.server.service_id, vmid: action.server.vmid, backupId: backup.volid };
      return startVpsAction(deps, principal, action, { type: 'vps.restore', workflowType: 'vpsRestoreWorkflow', what: 'a restore', input: { ...input } });
    },
  }),
];

/**
 * Local stand-ins for the VPS family (CLOUD_DEV_ENDPOINTS=1, loopback only): give a VPS service a
 * machine on the simulated hypervisor, and make a machine's next task fail.
 */
export const vpsDevRoutes = [
  defineRoute({
    method: 'post',
    path: '/_dev/vps/{id}/machine',
    operationId: 'devVpsAttachMachine',
    summary: 'Build the hypervisor machine of a VPS service (what provisioning does)',
    tag: 'Development',
    scope: null,
    credential: 'none',
    marks: [],
    internal: true,
    params: idParams,
    body: z.object({ type: z.enum(['qemu', 'lxc']).default('qemu'), hostname: z.string().regex(HOSTNAME_RE).max(253).optional(), node: z.string().optional() }).strict(),
    responses: [{ status: 200, description: 'The machine record' }],
    async handler({ params, body, deps }) {
      const id = Number(params.id.replace(/^svc_/, ''));
      const service = Number.isSafeInteger(id) ? await deps.db('services').where({ id, family: 'vps' }).first() : undefined;
      if (!service) throw notFound('vps');
      const server = await attachVpsMachine(deps.db, deps.providers.hypervisor, service, body);
      return { body: { object: 'vps_machine', service: formatId('svc', server.service_id), vmid: server.vmid, node: server.node, type: server.type } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/_dev/vps/{id}/fail-next-task',
    operationId: 'devVpsFailNextTask',
    summary: 'Make the next hypervisor task of a VPS fail',
    tag: 'Development',
    scope: null,
    credential: 'none',
    marks: [],
    internal: true,
    params: idParams,
    body: z.object({ message: z.string().min(1).max(200).optional(), kind: z.enum(TASK_KINDS as [TaskKind, ...TaskKind[]]).optional() }).strict(),
    responses: [{ status: 200, description: 'The fault is armed' }],
    async handler({ params, body, deps }) {
      const simulator = deps.providers.hypervisor;
      if (!(simulator instanceof HypervisorSimulator)) throw notFound('simulated hypervisor');
      const id = Number(params.id.replace(/^svc_/, ''));
      const server: VpsServerRow | undefined = Number.isSafeInteger(id) ? await deps.db('vps_servers').where({ service_id: id }).first() : undefined;
      if (!server) throw notFound('vps');
      await simulator.failNextTask(server.vmid, body.message, body.kind);
      return { body: { object: 'vps_fault', vmid: server.vmid, fail_next_task: body.kind ?? 'any' } };
    },
  }),
];
