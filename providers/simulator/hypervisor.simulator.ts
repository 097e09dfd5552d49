import type { Knex } from 'knex';
import { randomBase62, sha256Hex } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import {
  HypervisorRefusedError,
  UnknownMachineError,
  type BackupMode,
  type BackupVolume,
  type ConsoleTicketGrant,
  type GuestStatus,
  type HypervisorProvider,
  type MachineConfig,
  type MachineIp,
  type MachineState,
  type MachineStatus,
  type MachineTemplate,
  type MachineType,
  type MetricPoint,
  type NewMachine,
  type PowerTaskKind,
  type TaskKind,
  type TaskRef,
  type TaskStatus,
  type Timeframe,
} from '../hypervisor.provider';
import { simulatedDelay } from '../switchboard';
import type { SimTask, SimulatedTasks, TaskEffect } from './task-engine';

/** How long things take at SIM_DELAY_SCALE 1: a power action a few seconds, a reinstall about a minute (with the boot). */
const TASK_MS: Record<TaskKind, number> = { start: 4_000, stop: 3_000, reinstall: 45_000, backup: 12_000, restore: 20_000 };
const BOOT_MS: Record<MachineType, number> = { qemu: 10_000, lxc: 2_000 };
/** Latency of one API call to the cluster. */
const CALL_MS = 50;
const CONSOLE_TICKET_TTL_MS = 60_000;
export const SIM_NODES = ['hv-a', 'hv-b'] as const;
const GB = 1024 ** 3;
const MB = 1024 ** 2;

interface TemplateDef extends MachineTemplate {
  osType: string;
  /** Nodes whose storage holds the template; all when absent. */
  nodes?: readonly string[];
  sizeBytes: number;
}

/** Templates by machine type; some only exist on one node's storage. */
export const SIM_TEMPLATES: readonly TemplateDef[] = [
  { id: 'local:import/debian-12-genericcloud-amd64.qcow2', name: 'Debian 12', type: 'qemu', storage: 'local', osType: 'l26', sizeBytes: 2.1 * GB },
  { id: 'local:import/ubuntu-24.04-server-cloudimg-amd64.qcow2', name: 'Ubuntu 24.04 LTS', type: 'qemu', storage: 'local', osType: 'l26', sizeBytes: 2.6 * GB },
  {
    id: 'local:import/rocky-9-genericcloud-amd64.qcow2',
    name: 'Rocky Linux 9',
    type: 'qemu',
    storage: 'local',
    osType: 'l26',
    nodes: ['hv-a'],
    sizeBytes: 2.3 * GB,
  },
  { id: 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst', name: 'Debian 12', type: 'lxc', storage: 'local', osType: 'debian', sizeBytes: 0.6 * GB },
  {
    id: 'local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst',
    name: 'Ubuntu 24.04 LTS',
    type: 'lxc',
    storage: 'local',
    osType: 'ubuntu',
    sizeBytes: 0.8 * GB,
  },
  {
    id: 'local:vztmpl/alpine-3.20-default_20240908_amd64.tar.xz',
    name: 'Alpine 3.20',
    type: 'lxc',
    storage: 'local',
    osType: 'alpine',
    nodes: ['hv-b'],
    sizeBytes: 0.1 * GB,
  },
];

/** Metric resolution per timeframe (step, points), as an RRD archive would keep them. */
const RESOLUTION: Record<Timeframe, { stepMs: number; points: number }> = {
  hour: { stepMs: 60_000, points: 60 },
  day: { stepMs: 30 * 60_000, points: 48 },
  week: { stepMs: 3 * 3_600_000, points: 56 },
  month: { stepMs: 12 * 3_600_000, points: 60 },
  year: { stepMs: 7 * 86_400_000, points: 52 },
};

interface MachineRow {
  vmid: number;
  node: string;
  type: MachineType;
  service_id: number | null;
  name: string;
  os_hostname: string | null;
  state: 'running' | 'stopped' | 'paused';
  started_at: Date | null;
  agent_ready_at: Date | null;
  cores: number;
  memory_mb: number;
  disk_gb: number;
  disk_used_bytes: number;
  template: string | null;
  os_type: string | null;
  disk_content: string | null;
  root_password_hash: string | null;
  ipv4: string;
  ipv6: string;
}

/** A stable pseudo-random fraction in [0, 1) for (seed, t): the same figures on every read. */
function noise(seed: number, t: number): number {
  let h = (seed * 374761393 + Math.floor(t) * 668265263) | 0;
  h = Math.imul(h ^ (h >>> 13), 1274126177);
  h ^= h >>> 16;
  return (h >>> 0) / 4294967296;
}

const round1 = (n: number) => Math.round(n * 10) / 10;
const pad = (n: number) => String(n).padStart(2, '0');
const backupStamp = (d: Date) =>
  `${d.getUTCFullYear()}_${pad(d.getUTCMonth() + 1)}_${pad(d.getUTCDate())}-${pad(d.getUTCHours())}_${pad(d.getUTCMinutes())}_${pad(d.getUTCSeconds())}`;
const passwordHash = (vmid: number, password: string) => sha256Hex(`sim-hv:${vmid}:${password}`);

/**
 * The hypervisor cluster, simulated in PostgreSQL. Its tasks run on the shared task engine
 * (providers/simulator/task-engine.ts): they take `TASK_MS × SIM_DELAY_SCALE`, run one at a time
 * per machine, take effect when their end time has passed (every read settles the machine first),
 * and fail on demand (`SimulatedTasks.failNext('vps', vmid)`). The outage switch wraps it like any
 * provider (providers/index.ts).
 */
export class HypervisorSimulator implements HypervisorProvider {
  readonly pollIntervalMs: number;

  private readonly scale: number;

  constructor(
    private readonly db: Knex,
    private readonly tasks: SimulatedTasks,
  ) {
    this.scale = tasks.scale;
    this.pollIntervalMs = Math.max(20, Math.round(1_000 * this.scale));
  }

  // ---- machines -------------------------------------------------------------------------------

  async createMachine(spec: NewMachine): Promise<MachineStatus> {
    await this.call();
    const existing = await this.db('sim_hv_machines').where({ service_id: spec.serviceId }).first();
    if (existing) return this.status(existing.vmid);
    const { nextval } = (await this.db.raw("select nextval('sim_hv_vmid_seq')::int as nextval")).rows[0];
    const vmid = Number(nextval);
    const wanted = SIM_TEMPLATES.find((t) => t.type === spec.type && (t.id === spec.template || (spec.os !== undefined && t.id.includes(`/${spec.os}-`))));
    const node = spec.node ?? wanted?.nodes?.[0] ?? SIM_NODES[vmid % SIM_NODES.length];
    const template = this.templateDefs(spec.type, node).find((t) => t.id === wanted?.id) ?? this.templateDefs(spec.type, node)[0];
    const now = new Date();
    // A new machine boots: its guest answers after the boot time.
    const bootedAt = new Date(now.getTime() + BOOT_MS[spec.type] * this.scale);
    await this.db('sim_hv_machines')
      .insert({
        vmid,
        node,
        type: spec.type,
        service_id: spec.serviceId,
        name: spec.hostname,
        os_hostname: spec.hostname,
        state: 'running',
        started_at: now,
        agent_ready_at: bootedAt,
        cores: spec.cores,
        memory_mb: spec.memoryMb,
        disk_gb: spec.diskGb,
        disk_used_bytes: Math.round(template.sizeBytes * 1.4),
        template: template.id,
        os_type: template.osType,
        disk_content: `install of ${template.id}`,
        ipv4: spec.ipv4 ?? `203.0.113.${(vmid % 200) + 40}`,
        ipv6: `2001:db8:100::${vmid.toString(16)}`,
      })
      .onConflict('service_id')
      .ignore();
    const row = await this.db('sim_hv_machines').where({ service_id: spec.serviceId }).first();
    return this.status(row.vmid);
  }

  async destroyMachine(vmid: number): Promise<void> {
    await this.call();
    await this.db.transaction(async (trx) => {
      await this.tasks.lock(trx, 'vps', vmid);
      await this.tasks.forget('vps', vmid, trx);
      await trx('sim_hv_machines').where({ vmid }).delete();
    });
  }

  async status(vmid: number): Promise<MachineStatus> {
    await this.call();
    const m = await this.settle(vmid);
    const now = Date.now();
    const state = await this.effectiveState(m);
    const running = state === 'running' || state === 'paused';
    const t = now / 10_000;
    return {
      vmid: m.vmid,
      node: m.node,
      type: m.type,
      name: m.name,
      osHostname: running ? m.os_hostname : null,
      state,
      uptimeSeconds: running && m.started_at ? Math.max(0, Math.floor((now - new Date(m.started_at).getTime()) / 1000)) : null,
      cpu: { cores: m.cores, usagePercent: state === 'running' ? round1(2 + noise(m.vmid, t) * 38) : 0 },
      memory: { usedBytes: running ? Math.round(m.memory_mb * MB * (0.3 + noise(m.vmid + 7, t) * 0.4)) : 0, totalBytes: m.memory_mb * MB },
      disk: { usedBytes: Number(m.disk_used_bytes), totalBytes: m.disk_gb * GB },
      ipv4: m.ipv4,
      ipv6: m.ipv6,
    };
  }

  async config(vmid: number): Promise<MachineConfig> {
    await this.call();
    const m = await this.settle(vmid);
    const bootDisk = m.type === 'qemu' ? `local-lvm:vm-${m.vmid}-disk-0,size=${m.disk_gb}G` : `local-lvm:subvol-${m.vmid}-disk-0,size=${m.disk_gb}G`;
    return { vmid: m.vmid, node: m.node, type: m.type, cores: m.cores, memoryMb: m.memory_mb, bootDisk, osType: m.os_type, hostname: m.name };
  }

  async ips(vmid: number): Promise<MachineIp[]> {
    await this.call();
    const m = await this.machine(vmid);
    const v4 = m.ipv4.split('.');
    return [
      { version: 4, address: m.ipv4, netmask: '255.255.255.0', gateway: `${v4.slice(0, 3).join('.')}.1`, prefix: '24' },
      { version: 6, address: m.ipv6, netmask: null, gateway: '2001:db8:100::1', prefix: '64' },
    ];
  }

  async templates(vmid: number): Promise<MachineTemplate[]> {
    await this.call();
    const m = await this.machine(vmid);
    return this.templateDefs(m.type, m.node).map(({ id, name, type, storage }) => ({ id, name, type, storage }));
  }

  async metrics(vmid: number, timeframe: Timeframe): Promise<MetricPoint[]> {
    await this.call();
    const m = await this.machine(vmid);
    const { stepMs, points } = RESOLUTION[timeframe];
    const last = Math.floor(Date.now() / stepMs) * stepMs;
    const out: MetricPoint[] = [];
    for (let i = points - 1; i >= 0; i--) {
      const at = last - i * stepMs;
      const slot = at / 60_000;
      out.push({
        time: new Date(at).toISOString(),
        cpuPercent: round1(noise(m.vmid, slot) * 60),
        memoryBytes: Math.round(m.memory_mb * MB * (0.25 + noise(m.vmid + 1, slot) * 0.5)),
        diskReadBytes: Math.round(noise(m.vmid + 2, slot) * 40 * MB),
        diskWriteBytes: Math.round(noise(m.vmid + 3, slot) * 25 * MB),
        netInBytes: Math.round(noise(m.vmid + 4, slot) * 80 * MB),
        netOutBytes: Math.round(noise(m.vmid + 5, slot) * 120 * MB),
      });
    }
    return out;
  }

  async setHostname(vmid: number, hostname: string): Promise<{ appliesAt: 'now' | 'next_boot' }> {
    await this.call();
    const m = await this.settle(vmid);
    if (m.type === 'lxc') {
      await this.db('sim_hv_machines').where({ vmid }).update({ name: hostname, os_hostname: hostname });
      return { appliesAt: 'now' };
    }
    await this.db('sim_hv_machines').where({ vmid }).update({ name: hostname });
    return { appliesAt: 'next_boot' };
  }

  async consoleTicket(vmid: number, type: 'vnc' | 'spice'): Promise<ConsoleTicketGrant> {
    await this.call();
    const m = await this.machine(vmid);
    if (type === 'spice' && m.type !== 'qemu') throw new HypervisorRefusedError('SPICE consoles exist for qemu machines only');
    const secret = randomBase62(40);
    const expiresAt = new Date(Date.now() + CONSOLE_TICKET_TTL_MS);
    await this.db('sim_hv_console_tickets').insert({ vmid, ticket_hash: sha256Hex(secret), type, expires_at: expiresAt });
    const host = `${m.node}.hv.cloud.example.test`;
    if (type === 'vnc') {
      const kind = m.type === 'qemu' ? 'kvm' : 'lxc';
      const url = `https://${host}:8006/?console=${kind}&novnc=1&node=${m.node}&vmid=${m.vmid}&vncticket=${encodeURIComponent(secret)}`;
      return { type, url, file: null, expiresAt };
    }
    const file = [
      '[virt-viewer]',
      'type=spice',
      `host=pvespiceproxy:${m.node}:${m.vmid}`,
      `password=${secret}`,
      `proxy=http://${host}:3128`,
      'tls-port=61000',
      'delete-this-file=1',
      `title=VM ${m.vmid} - ${m.name}`,
      'secure-attention=Ctrl+Alt+Ins',
      '',
    ].join('\n');
    return { type, url: null, file, expiresAt };
  }

  /** The console proxy accepts a ticket (or SPICE password) once, before it expires. */
  async redeemConsoleTicket(vmid: number, secret: string): Promise<boolean> {
    await this.call();
    const updated = await this.db('sim_hv_console_tickets')
      .where({ vmid, ticket_hash: sha256Hex(secret) })
      .whereNull('used_at')
      .where('expires_at', '>', new Date())
      .update({ used_at: new Date() });
    return updated === 1;
  }

  // ---- tasks ----------------------------------------------------------------------------------

  async power(vmid: number, action: PowerTaskKind, key: string): Promise<TaskRef> {
    await this.call();
    return this.enqueue(vmid, action, {}, key);
  }

  async reinstall(vmid: number, opts: { template: string; rootPassword: string }, key: string): Promise<TaskRef> {
    await this.call();
    const m = await this.machine(vmid);
    const template = this.templateDefs(m.type, m.node).find((t) => t.id === opts.template);
    if (!template) throw new HypervisorRefusedError(`template ${opts.template} is not available for this machine`);
    // Only a hash reaches the task's record, as a real installer would keep it (in /etc/shadow).
    return this.enqueue(vmid, 'reinstall', { template: template.id, root_password_hash: passwordHash(vmid, opts.rootPassword) }, key);
  }

  async backup(vmid: number, mode: BackupMode, key: string): Promise<TaskRef & { volid: string }> {
    await this.call();
    const prior = await this.tasks.byKey(key);
    if (prior) return { upid: prior.id, volid: String(prior.params.volid) };
    const m = await this.machine(vmid);
    const ext = m.type === 'qemu' ? 'vma.zst' : 'tar.zst';
    let at = Date.now();
    let volid: string;
    for (;;) {
      volid = `local:backup/vzdump-${m.type}-${m.vmid}-${backupStamp(new Date(at))}.${ext}`;
      const taken = (await this.db('sim_hv_backups').where({ volid }).first()) ?? (await this.tasks.findByParam('vps', 'backup', 'volid', volid));
      if (!taken) break;
      at += 1_000;
    }
    const task = await this.enqueue(vmid, 'backup', { volid, mode }, key);
    const stored = await this.tasks.get(task.upid);
    return { upid: task.upid, volid: String(stored!.params.volid) };
  }

  async listBackups(vmid: number): Promise<BackupVolume[]> {
    await this.call();
    await this.settle(vmid);
    const rows = await this.db('sim_hv_backups')
      .where({ vmid })
      .orderBy([
        { column: 'created_at', order: 'desc' },
        { column: 'volid', order: 'desc' },
      ]);
    return rows.map((r) => ({
      volid: r.volid,
      vmid: r.vmid,
      storage: r.storage,
      archive: r.archive,
      mode: r.mode,
      sizeBytes: Number(r.size_bytes),
      createdAt: new Date(r.created_at),
    }));
  }

  async deleteBackup(volid: string): Promise<boolean> {
    await this.call();
    return (await this.db('sim_hv_backups').where({ volid }).delete()) > 0;
  }

  async restore(vmid: number, volid: string, key: string): Promise<TaskRef> {
    await this.call();
    const prior = await this.tasks.byKey(key);
    if (prior) return { upid: prior.id };
    const backup = await this.db('sim_hv_backups').where({ volid }).first();
    if (!backup || backup.vmid !== vmid) throw new HypervisorRefusedError(`backup ${volid} does not belong to machine ${vmid}`);
    const m = await this.settle(vmid);
    if ((await this.effectiveState(m)) !== 'stopped') throw new HypervisorRefusedError('the machine must be stopped before a restore');
    return this.enqueue(vmid, 'restore', { volid }, key);
  }

  async taskByKey(key: string): Promise<TaskRef | null> {
    await this.call();
    const task = await this.tasks.byKey(key);
    return task ? { upid: task.id } : null;
  }

  async task(upid: string): Promise<TaskStatus> {
    await this.call();
    const task = await this.tasks.get(upid);
    if (!task || task.backend !== 'vps') throw new HypervisorRefusedError(`no task ${upid}`);
    await this.settle(Number(task.subject));
    const after = (await this.tasks.get(upid))!;
    return { upid, kind: after.kind, status: after.status, error: after.error };
  }

  async guest(vmid: number): Promise<GuestStatus> {
    await this.call();
    const m = await this.settle(vmid);
    const state = await this.effectiveState(m);
    const ready = state === 'running' && m.agent_ready_at !== null && new Date(m.agent_ready_at).getTime() <= Date.now();
    return { agentReady: ready, hostname: ready ? m.os_hostname : null, ipv4: ready ? m.ipv4 : null, ipv6: ready ? m.ipv6 : null };
  }

  // ---- fault injection and inspection (simulator only) -------------------------------------------

  /** Whether the installed root password is this one (the reinstall reached the machine). */
  async checkRootPassword(vmid: number, password: string): Promise<boolean> {
    const m = await this.machine(vmid);
    return m.root_password_hash === passwordHash(vmid, password);
  }

  /** Raw machine record, for tests (disk content, template). */
  async inspect(vmid: number): Promise<MachineRow> {
    return this.settle(vmid);
  }

  // ---- internals ------------------------------------------------------------------------------

  private async call(): Promise<void> {
    await simulatedDelay(CALL_MS, this.scale);
  }

  private templateDefs(type: MachineType, node: string): TemplateDef[] {
    return SIM_TEMPLATES.filter((t) => t.type === type && (!t.nodes || t.nodes.includes(node)));
  }

  private async machine(vmid: number): Promise<MachineRow> {
    const m = await this.db('sim_hv_machines').where({ vmid }).first();
    if (!m) throw new UnknownMachineError(vmid);
    return m;
  }

  /** A running or queued task changes what the machine looks like until it ends. */
  private async effectiveState(m: MachineRow): Promise<MachineState> {
    const active = await this.tasks.current('vps', m.vmid);
    if (active && (active.kind === 'reinstall' || active.kind === 'restore')) return 'stopped';
    if (active?.kind === 'backup' && m.state === 'running') {
      if (active.params.mode === 'suspend') return 'paused';
      if (active.params.mode === 'stop') return 'stopped';
    }
    return m.state;
  }

  /** Queues a task behind the machine's unfinished ones; the same key returns the same task. */
  private async enqueue(vmid: number, kind: TaskKind, params: Record<string, unknown>, key: string): Promise<TaskRef> {
    const m = await this.machine(vmid);
    const task = await this.tasks.enqueue({
      backend: 'vps',
      subject: vmid,
      kind,
      params,
      key,
      durationMs: TASK_MS[kind],
      id: () => `UPID:${m.node}:${newUlidId('task').slice(5)}:${kind}:${vmid}:root@pam:`,
    });
    return { upid: task.id };
  }

  /** Applies the effects of every task of the machine whose end time has passed, in order. */
  private async settle(vmid: number): Promise<MachineRow> {
    await this.tasks.settle('vps', vmid, async (trx, task): Promise<TaskEffect> => {
      const m: MachineRow | undefined = await trx('sim_hv_machines').where({ vmid }).forUpdate().first();
      if (!m) return { error: 'the machine is gone' };
      const patch = await this.effectOf(trx, m, task);
      if (patch === null) return { error: 'the backup is gone' };
      if (Object.keys(patch).length) await trx('sim_hv_machines').where({ vmid }).update(patch);
    });
    return this.machine(vmid);
  }

  /** What a finished task changes on the machine; null when it cannot take effect (it ends in error). */
  private async effectOf(trx: Knex.Transaction, m: MachineRow, task: SimTask): Promise<Partial<MachineRow> | null> {
    const endedAt = task.endsAt;
    switch (task.kind as TaskKind) {
      case 'start':
        if (m.state === 'running') return {};
        // The guest OS boots with the machine's current name: a qemu rename takes effect here.
        return { state: 'running', started_at: endedAt, agent_ready_at: new Date(endedAt.getTime() + BOOT_MS[m.type] * this.scale), os_hostname: m.name };
      case 'stop':
        if (m.state === 'stopped') return {};
        return { state: 'stopped', started_at: null, agent_ready_at: null };
      case 'reinstall': {
        const template = SIM_TEMPLATES.find((t) => t.id === task.params.template)!;
        return {
          state: 'stopped',
          started_at: null,
          agent_ready_at: null,
          template: template.id,
          os_type: template.osType,
          disk_content: `install of ${template.id} (${task.id})`,
          disk_used_bytes: Math.round(template.sizeBytes * 1.4),
          root_password_hash: String(task.params.root_password_hash),
        };
      }
      case 'backup': {
        const volid = String(task.params.volid);
        const storage = volid.slice(0, volid.indexOf(':'));
        await trx('sim_hv_backups')
          .insert({
            volid,
            vmid: m.vmid,
            node: m.node,
            storage,
            archive: volid.slice(volid.indexOf('/') + 1),
            type: m.type,
            mode: String(task.params.mode),
            size_bytes: Math.round(Number(m.disk_used_bytes) * 0.45),
            disk_content: m.disk_content,
            template: m.template,
            os_type: m.os_type,
            created_at: endedAt,
          })
          .onConflict('volid')
          .ignore();
        return {};
      }
      case 'restore': {
        const backup = await trx('sim_hv_backups').where({ volid: task.params.volid }).first();
        if (!backup) return null;
        return {
          state: 'stopped',
          started_at: null,
          agent_ready_at: null,
          disk_content: backup.disk_content,
          template: backup.template,
          os_type: backup.os_type,
          disk_used_bytes: Math.round(Number(backup.size_bytes) / 0.45),
        };
      }
    }
  }
}
