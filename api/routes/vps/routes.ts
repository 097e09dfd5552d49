import { z } from 'zod';
import { formatId } from '../../../common/ids';
import type { Principal } from '../../../domain/principal';
import { findTarget, visibleServiceId } from '../../../domain/services';
import type { OperationInputOf } from '../../../domain/operations/start';
import {
  claimReinstall,
  findVisibleVps,
  machineGuard,
  recordHostname,
  recordMachinePlacement,
  refuseWhileReinstalling,
  requireMachine,
  splitVpsRow,
  visibleVpsQuery,
  type VpsServerRow,
} from '../../../domain/vps/store';
import { ROOT_PASSWORD_PURPOSE } from '../../../domain/vps/secrets';
import { liveRead } from '../../../providers/errors';
import { BACKUP_ID_PATTERN, TIMEFRAMES, type BackupVolume } from '../../../providers/hypervisor.provider';
import type { AppDeps } from '../../deps';
import { notFound, unsupportedForProduct, validationFailed } from '../../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { defineAsyncAction, defineBackendList, defineSyncWrite } from '../../route-presets';
import { listOf } from '../../schemas';
import { startOperation, type OperationStart } from '../../start-operation';
import {
  BackupBody,
  backupParams,
  backupSortKey,
  ConsoleBody,
  ConsoleTicketSchema,
  HostnameBody,
  idParams,
  PowerBody,
  presentBackup,
  presentVps,
  ReinstallBody,
  VpsBackupSchema,
  VpsConfigSchema,
  VpsIpSchema,
  VpsMetricsSchema,
  VpsSchema,
  VpsTemplateSchema,
} from './schemas';

/**
 * Virtual servers (SPEC "VPS"). `{id}` is the VPS service (`svc_<n>`); the machine behind it is
 * found in `vps_servers`. Lists come from the database with live fields null; single reads ask the
 * hypervisor and fall back to null live fields; power, reinstall, backup and restore are operations.
 * Hypervisor refusals and vanished machines answer 409 and an unreachable hypervisor 503, mapped
 * once for every family in api/app.ts.
 */
const TAG = 'Virtual servers';

/** Reads that need the machine answer 409 while it is not on the hypervisor (yet, or any more). */
const NO_MACHINE = { status: 409, description: 'The VPS has no machine on the hypervisor, yet or any more (`conflict`)' };

/** A backup id of this VPS's machine, or 400 (malformed) / 404 (not one of its backups). */
async function findOwnBackup(deps: AppDeps, server: VpsServerRow, backupId: string): Promise<BackupVolume> {
  if (!BACKUP_ID_PATTERN.test(backupId)) {
    throw validationFailed([{ param: 'backup_id', message: 'must look like <storage>:backup/<archive_file_name>, URL-encoded in the path' }]);
  }
  const backups = await deps.providers.hypervisor.listBackups(server.vmid);
  const backup = backups.find((b) => b.volid === backupId);
  if (!backup) throw notFound('backup');
  return backup;
}

const resourceOf = (serviceId: number) => ({ object: 'vps' as const, id: formatId('svc', serviceId) });

/**
 * A visible VPS whose `capability` is true, with the machine that backs it (409 when it has none yet).
 * With `action` (what the request does, for the message), a mutation: refused with 409 while billing
 * has the service suspended or terminated.
 */
async function machineTarget(deps: AppDeps, principal: Principal, id: string, capability: string, action?: string) {
  const target = await findTarget(() => findVisibleVps(deps.db, principal, id), { capability, action });
  return { target, server: requireMachine(target) };
}

/** The VPS a power, backup or restore action acts on: a machineTarget not being reinstalled (409 names `what`). */
async function actionTarget(deps: AppDeps, principal: Principal, id: string, capability: string, what: string) {
  const action = await machineTarget(deps, principal, id, capability, what);
  refuseWhileReinstalling(action.server, what);
  return action;
}

/**
 * Starts a power, backup or restore operation in one statement, without reading the VPS first: the
 * checks of actionTarget are the guards of the statement that writes the operation's row, refused
 * in the same order (404, 400 for the capability, 409 for billing, no machine, a reinstall), and the
 * workflow's input comes from the machine row it locked.
 */
function startVpsAction<T extends 'vps.power' | 'vps.backup' | 'vps.restore'>(
  deps: AppDeps,
  principal: Principal,
  rawId: string,
  { capability, what }: { capability: string; what: string },
  start: Pick<OperationStart<T>, 'type'> & { input: (server: Pick<VpsServerRow, 'service_id' | 'vmid'>) => OperationInputOf<T> },
) {
  const serviceId = visibleServiceId(principal, rawId);
  return startOperation(deps, principal, {
    type: start.type,
    input: (locked) => start.input(locked.vps as Pick<VpsServerRow, 'service_id' | 'vmid'>),
    resource: resourceOf(serviceId),
    serviceId,
    serviceChecks: { family: 'vps', capability, action: what },
    initialStatus: 'running',
    guards: [machineGuard(serviceId, principal.accountId, what)],
  });
}

export const vpsRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/vps',
    operationId: 'listVps',
    summary: 'List virtual servers',
    description:
      "From the control plane's database: `state`, `os_hostname`, `uptime_seconds`, `cpu`, `memory` and `disk` are `null` (read one VPS for live values).",
    tag: TAG,
    scope: 'vps:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of VPS, newest first', schema: listOf(VpsSchema, 'VpsList') }],
    async handler({ query, principal, deps }) {
      const qb = visibleVpsQuery(deps.db, principal);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('vps', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      const data = page.rows.map((row) => {
        const { service, server } = splitVpsRow(row);
        return presentVps(service, server, null);
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
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The VPS', schema: VpsSchema }],
    async handler({ params, principal, deps }) {
      const target = await findVisibleVps(deps.db, principal, params.id);
      const { server } = target;
      const live = server ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.hypervisor.status(server.vmid)) : null;
      if (server && live && (live.node !== server.node || live.name !== server.hostname)) {
        await recordMachinePlacement(deps.db, server.service_id, { node: live.node, hostname: live.name });
      }
      return { body: presentVps(target.service, server, live) };
    },
  }),
  defineSyncWrite({
    method: 'patch',
    path: '/v1/vps/{id}',
    operationId: 'updateVps',
    summary: 'Rename a virtual server',
    description:
      "Body `hostname`. On `lxc` the container's hostname changes immediately. On `qemu` the VM is renamed now (`hostname`) and the guest OS picks the name up at its next boot: until a reboot, `os_hostname` still shows the old name.",
    tag: TAG,
    scope: 'vps:write',
    marks: ['R', 'I'],
    params: idParams,
    body: HostnameBody,
    exampleBody: { hostname: 'web-2.example.com' },
    answer: { status: 200, description: 'The VPS after the rename', schema: VpsSchema },
    target: ({ params, principal, deps }) => machineTarget(deps, principal, params.id, 'rename', 'a rename'),
    async write({ target, server }, { body, deps }) {
      await deps.providers.hypervisor.setHostname(server.vmid, body.hostname);
      await recordHostname(deps.db, server.service_id, body.hostname);
      const live = await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.hypervisor.status(server.vmid));
      return presentVps(target.service, { ...server, hostname: body.hostname }, live);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/vps/{id}/config',
    operationId: 'getVpsConfig',
    summary: 'Get the hypervisor configuration of a virtual server',
    tag: TAG,
    scope: 'vps:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The configuration', schema: VpsConfigSchema }, NO_MACHINE],
    async handler({ params, principal, deps }) {
      const server = requireMachine(await findVisibleVps(deps.db, principal, params.id));
      const c = await deps.providers.hypervisor.config(server.vmid);
      return {
        body: {
          object: 'vps_config' as const,
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
  defineBackendList({
    path: '/v1/vps/{id}/ips',
    operationId: 'listVpsIps',
    summary: 'List the IP addresses of a virtual server',
    tag: TAG,
    scope: 'vps:read',
    params: idParams,
    item: VpsIpSchema,
    listId: 'VpsIpList',
    listed: 'IPv4 and IPv6 addresses',
    otherResponses: [NO_MACHINE],
    target: async ({ params, principal, deps }) => requireMachine(await findVisibleVps(deps.db, principal, params.id)),
    items: (server, deps) => deps.providers.hypervisor.ips(server.vmid),
    list: (server) => listFingerprint(`vps.ips:${server.service_id}`, {}),
    sortKey: (ip) => `${ip.version}|${ip.address}`,
    present: (ip) => ({ object: 'vps_ip' as const, ...ip }),
  }),
  defineBackendList({
    path: '/v1/vps/{id}/templates',
    operationId: 'listVpsTemplates',
    summary: 'List the templates a virtual server can be reinstalled with',
    description: 'Depends on the machine type (`qemu` or `lxc`) and on the node it runs on.',
    tag: TAG,
    scope: 'vps:read',
    params: idParams,
    item: VpsTemplateSchema,
    listId: 'VpsTemplateList',
    listed: 'Templates',
    otherResponses: [NO_MACHINE],
    target: async ({ params, principal, deps }) => (await machineTarget(deps, principal, params.id, 'templates')).server,
    items: (server, deps) => deps.providers.hypervisor.templates(server.vmid),
    list: (server) => listFingerprint(`vps.templates:${server.service_id}`, {}),
    sortKey: (t) => t.id,
    present: (t) => ({ object: 'vps_template' as const, ...t }),
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
    marks: [],
    params: idParams,
    query: z.object({ timeframe: z.enum(TIMEFRAMES).default('hour') }),
    responses: [{ status: 200, description: 'The metric series', schema: VpsMetricsSchema }, NO_MACHINE],
    async handler({ params, query, principal, deps }) {
      const { server } = await machineTarget(deps, principal, params.id, 'metrics');
      const points = await deps.providers.hypervisor.metrics(server.vmid, query.timeframe);
      return {
        body: {
          object: 'vps_metrics' as const,
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
  defineSyncWrite({
    method: 'post',
    path: '/v1/vps/{id}/console',
    operationId: 'createVpsConsoleTicket',
    summary: 'Open a console on a virtual server',
    description:
      'Single-use ticket giving full OS access, bypassing network and SSH. Body `type`: `vnc` (default; `url` for a browser client) or `spice` (qemu only; `file` is a remote-viewer file that contains the password). Never replayed by Idempotency-Key, never cached, never logged.',
    tag: TAG,
    scope: 'vps:console',
    marks: ['R'],
    returnsSecret: true,
    params: idParams,
    body: ConsoleBody,
    exampleBody: { type: 'vnc' },
    answer: { status: 201, description: 'The console ticket', schema: ConsoleTicketSchema },
    target: async ({ params, principal, deps }) => (await machineTarget(deps, principal, params.id, 'console', 'a console')).server,
    async write(server, { body, deps }) {
      if (body.type === 'spice' && server.type !== 'qemu') throw unsupportedForProduct('console type spice');
      const grant = await deps.providers.hypervisor.consoleTicket(server.vmid, body.type);
      return { object: 'console_ticket' as const, type: grant.type, url: grant.url, file: grant.file, expires_at: grant.expiresAt.toISOString() };
    },
  }),
  defineAsyncAction({
    path: '/v1/vps/{id}/power',
    operationId: 'powerVps',
    summary: 'Start, stop or reboot a virtual server',
    description:
      'Body `action`: `start`, `stop` or `reboot`. Answers 202 as soon as the order is issued; the `vps.power` operation succeeds when the machine has reached the state (`reboot`: stop, wait, start, ends `running`). `409 conflict` while a reinstall runs.',
    tag: TAG,
    scope: 'vps:power',
    marks: ['R', 'A', 'I'],
    params: idParams,
    body: PowerBody,
    exampleBody: { action: 'reboot' },
    operation: 'vps.power',
    async start({ params, body, principal, deps }) {
      return startVpsAction(
        deps,
        principal,
        params.id,
        { capability: 'power', what: 'a power action' },
        {
          type: 'vps.power',
          input: (server) => ({ serviceId: server.service_id, vmid: server.vmid, action: body.action }),
        },
      );
    },
  }),
  defineAsyncAction({
    path: '/v1/vps/{id}/reinstall',
    operationId: 'reinstallVps',
    summary: 'Reinstall a virtual server from a template',
    description:
      'Body `template` (an id of GET /v1/vps/{id}/templates) and `root_password`. Wipes the whole disk; the IP addresses are kept. The `vps.reinstall` operation reports its stages (`provision`, `boot`, `health_check`) in `progress` and `result.stage`, and may take minutes. `reinstalling` is true until it ends; power actions, backups, restores and a second reinstall get `409 conflict` meanwhile. The password is sealed at rest until the hypervisor has it, then deleted; it appears in no response, log or workflow history.',
    tag: TAG,
    scope: 'vps:write',
    marks: ['D', 'A', 'I'],
    params: idParams,
    body: ReinstallBody,
    exampleBody: { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'a long and random passphrase' },
    operation: 'vps.reinstall',
    async start({ params, body, principal, deps }) {
      const { target, server } = await machineTarget(deps, principal, params.id, 'reinstall', 'a reinstall');
      refuseWhileReinstalling(server, 'another reinstall');
      const templates = await deps.providers.hypervisor.templates(server.vmid);
      if (!templates.some((t) => t.id === body.template)) {
        throw validationFailed([{ param: 'template', message: 'is not a template of this VPS (see GET /v1/vps/{id}/templates)' }]);
      }
      const sealed = deps.keyring.encrypt(ROOT_PASSWORD_PURPOSE, body.root_password);
      // The flag and the sealed password are written with the operation row: all or nothing. If the
      // workflow cannot start, the row is taken back, and with it (foreign keys) the flag and the password.
      return startOperation(deps, principal, {
        type: 'vps.reinstall',
        input: { serviceId: server.service_id, vmid: server.vmid, template: body.template },
        resource: resourceOf(target.service.id),
        serviceId: server.service_id,
        initialStatus: 'running',
        inTransaction: (trx, operationId) => claimReinstall(trx, server.service_id, operationId, sealed),
      });
    },
  }),
  defineBackendList({
    path: '/v1/vps/{id}/backups',
    operationId: 'listVpsBackups',
    summary: 'List the backups of a virtual server',
    description: "Read from the hypervisor's backup storage, newest first. A backup being made appears once it is complete, with its final size.",
    tag: TAG,
    scope: 'vps:read',
    params: idParams,
    item: VpsBackupSchema,
    listId: 'VpsBackupList',
    listed: 'Backups',
    otherResponses: [NO_MACHINE],
    target: async ({ params, principal, deps }) => (await machineTarget(deps, principal, params.id, 'backups')).server,
    items: (server, deps) => deps.providers.hypervisor.listBackups(server.vmid),
    list: (server) => listFingerprint(`vps.backups:${server.service_id}`, {}),
    sortKey: backupSortKey,
    present: presentBackup,
  }),
  defineAsyncAction({
    path: '/v1/vps/{id}/backups',
    operationId: 'createVpsBackup',
    summary: 'Back up a virtual server',
    description:
      'Body `mode`: `snapshot` (default, the machine keeps running), `suspend` or `stop`. The `vps.backup` operation carries `result.backup_id` once the task is queued and succeeds when the backup appears in the list, with `result.size_bytes`.',
    tag: TAG,
    scope: 'vps:write',
    marks: ['R', 'A', 'I'],
    params: idParams,
    body: BackupBody,
    exampleBody: { mode: 'snapshot' },
    operation: 'vps.backup',
    async start({ params, body, principal, deps }) {
      return startVpsAction(
        deps,
        principal,
        params.id,
        { capability: 'backups', what: 'a backup' },
        {
          type: 'vps.backup',
          input: (server) => ({ serviceId: server.service_id, vmid: server.vmid, mode: body.mode as 'snapshot' | 'suspend' | 'stop' }),
        },
      );
    },
  }),
  defineSyncWrite({
    method: 'delete',
    path: '/v1/vps/{id}/backups/{backup_id}',
    operationId: 'deleteVpsBackup',
    summary: 'Delete a backup of a virtual server',
    description: '`backup_id` contains `:` and `/`: URL-encode it (`local%3Abackup%2Fvzdump-...`). A backup of another VPS is `404`.',
    tag: TAG,
    scope: 'vps:write',
    marks: ['D', 'I'],
    params: backupParams,
    answer: { status: 204, description: 'Deleted' },
    target: async ({ params, principal, deps }) => (await machineTarget(deps, principal, params.id, 'backups', 'deleting a backup')).server,
    async write(server, { params, deps }) {
      const backup = await findOwnBackup(deps, server, params.backup_id);
      if (!(await deps.providers.hypervisor.deleteBackup(backup.volid))) throw notFound('backup');
    },
  }),
  defineAsyncAction({
    path: '/v1/vps/{id}/backups/{backup_id}/restore',
    operationId: 'restoreVpsBackup',
    summary: 'Restore a backup over a virtual server',
    description:
      'Checks first that the backup belongs to this VPS (`404` otherwise; a malformed id is `400`). The `vps.restore` operation powers the machine off and overwrites its whole disk; the machine is left stopped. `409 conflict` while a reinstall runs.',
    tag: TAG,
    scope: 'vps:write',
    marks: ['D', 'A', 'I'],
    params: backupParams,
    operation: 'vps.restore',
    async start({ params, principal, deps }) {
      // The backup is looked up on the machine first (404 if it is another VPS's), so this one reads.
      const { server } = await actionTarget(deps, principal, params.id, 'restore', 'a restore');
      const backup = await findOwnBackup(deps, server, params.backup_id);
      return startVpsAction(
        deps,
        principal,
        params.id,
        { capability: 'restore', what: 'a restore' },
        {
          type: 'vps.restore',
          input: (locked) => ({ serviceId: locked.service_id, vmid: locked.vmid, backupId: backup.volid }),
        },
      );
    },
  }),
];
