import { BackendGoneError, BackendRefusedError } from './errors';

/**
 * What the hypervisor cluster can do for the VPS family (the shape of a Proxmox-style API): qemu
 * virtual machines and lxc containers addressed by a cluster-wide `vmid`, on nodes that are
 * informational only (a migration moves a machine). Work that takes time is a task: the call
 * returns a task id (`upid`) at once and the task's status is polled.
 *
 * Every method throws BackendUnavailableError (providers/switchboard.ts) when the
 * cluster does not answer, and UnknownMachineError when the vmid does not exist.
 * The embedded implementation is providers/simulator/hypervisor.simulator.ts.
 */
export type MachineType = 'qemu' | 'lxc';
export type MachineState = 'running' | 'stopped' | 'paused' | 'unknown';
export type PowerTaskKind = 'start' | 'stop';
export type BackupMode = 'snapshot' | 'suspend' | 'stop';
export const BACKUP_MODES: readonly BackupMode[] = ['snapshot', 'suspend', 'stop'];
export const TIMEFRAMES = ['hour', 'day', 'week', 'month', 'year'] as const;
/** Kinds of hypervisor task (what `failNext` can target). */
export const TASK_KINDS = ['start', 'stop', 'reinstall', 'backup', 'restore'] as const;
export type TaskKind = (typeof TASK_KINDS)[number];
export type Timeframe = (typeof TIMEFRAMES)[number];

export class UnknownMachineError extends BackendGoneError {
  constructor(readonly vmid: number) {
    super('vps', `machine ${vmid}`, 'The machine of this VPS is not on the hypervisor any more.');
    this.name = 'UnknownMachineError';
  }
}

export interface NewMachine {
  /** The VPS service the machine is built for. Creating twice for one service returns the first machine. */
  serviceId: number;
  type: MachineType;
  hostname: string;
  cores: number;
  memoryMb: number;
  diskGb: number;
  /** A template id of `templates()`; a default one of the type when omitted. */
  template?: string;
  /** An OS such as `debian-12` (an order's option): the hypervisor picks its template, and a node that has it. */
  os?: string;
  node?: string;
  ipv4?: string;
}

export interface MachineStatus {
  vmid: number;
  node: string;
  type: MachineType;
  /** The machine's name (qemu VM name / lxc hostname), renamed at once by setHostname. */
  name: string;
  /** The hostname the guest OS runs with: on qemu a rename reaches it at the next boot. Null while stopped. */
  osHostname: string | null;
  state: MachineState;
  uptimeSeconds: number | null;
  cpu: { cores: number; usagePercent: number | null };
  memory: { usedBytes: number | null; totalBytes: number };
  disk: { usedBytes: number; totalBytes: number };
  ipv4: string;
  ipv6: string;
}

export interface MachineConfig {
  vmid: number;
  node: string;
  type: MachineType;
  cores: number;
  memoryMb: number;
  /** Storage descriptor as the hypervisor reports it, e.g. `local-lvm:vm-101-disk-0,size=40G`. */
  bootDisk: string;
  osType: string | null;
  hostname: string;
}

export interface MachineIp {
  version: 4 | 6;
  address: string;
  netmask: string | null;
  gateway: string | null;
  prefix: string | null;
}

export interface MachineTemplate {
  id: string;
  name: string;
  type: MachineType;
  storage: string | null;
}

export interface BackupVolume {
  /** `<storage>:backup/<archive_file_name>`. */
  volid: string;
  vmid: number;
  storage: string;
  archive: string;
  mode: BackupMode;
  sizeBytes: number;
  createdAt: Date;
}

export interface MetricPoint {
  time: string;
  cpuPercent: number | null;
  memoryBytes: number | null;
  diskReadBytes: number | null;
  diskWriteBytes: number | null;
  netInBytes: number | null;
  netOutBytes: number | null;
}

export interface ConsoleTicketGrant {
  type: 'vnc' | 'spice';
  url: string | null;
  /** SPICE remote-viewer file: carries the password. Never log it. */
  file: string | null;
  expiresAt: Date;
}

export interface TaskRef {
  upid: string;
}

export interface TaskStatus {
  upid: string;
  kind: string;
  status: 'running' | 'ok' | 'error';
  error: string | null;
}

export interface GuestStatus {
  /** The guest agent answers (the OS has booted). */
  agentReady: boolean;
  hostname: string | null;
  ipv4: string | null;
  ipv6: string | null;
}

/** Task calls take a caller key: the same key returns the same task, so retried activities do not queue twice. */
export interface HypervisorProvider {
  createMachine(spec: NewMachine): Promise<MachineStatus>;
  /** Stops and deletes the machine and its disk (its backups stay on the backup storage). No-op when gone. */
  destroyMachine(vmid: number): Promise<void>;
  status(vmid: number): Promise<MachineStatus>;
  config(vmid: number): Promise<MachineConfig>;
  ips(vmid: number): Promise<MachineIp[]>;
  /** Templates installable on this machine: they depend on its type and its node. */
  templates(vmid: number): Promise<MachineTemplate[]>;
  metrics(vmid: number, timeframe: Timeframe): Promise<MetricPoint[]>;
  /** Renames the machine. lxc: the container's hostname changes now; qemu: the guest picks it up at next boot. */
  setHostname(vmid: number, hostname: string): Promise<{ appliesAt: 'now' | 'next_boot' }>;
  /** A single-use console ticket. SPICE only on qemu. */
  consoleTicket(vmid: number, type: 'vnc' | 'spice'): Promise<ConsoleTicketGrant>;
  power(vmid: number, action: PowerTaskKind, key: string): Promise<TaskRef>;
  /** Wipes the disk and installs the template; keeps network addresses; leaves the machine stopped. */
  reinstall(vmid: number, opts: { template: string; rootPassword: string }, key: string): Promise<TaskRef>;
  backup(vmid: number, mode: BackupMode, key: string): Promise<TaskRef & { volid: string }>;
  listBackups(vmid: number): Promise<BackupVolume[]>;
  deleteBackup(volid: string): Promise<boolean>;
  /** Overwrites the whole disk with the backup; the machine must be stopped. */
  restore(vmid: number, volid: string, key: string): Promise<TaskRef>;
  /** The task created earlier under this key, if any. */
  taskByKey(key: string): Promise<TaskRef | null>;
  task(upid: string): Promise<TaskStatus>;
  guest(vmid: number): Promise<GuestStatus>;
  /** How often a task or a state is worth polling. */
  readonly pollIntervalMs: number;
}

/** `local:backup/vzdump-qemu-101-2026_11_22-10_00_00.vma.zst` */
export const BACKUP_ID_PATTERN = /^[a-z][a-z0-9_.-]{0,63}:backup\/vzdump-(qemu|lxc)-\d+-\d{4}_\d{2}_\d{2}-\d{2}_\d{2}_\d{2}\.(vma|tar)(\.(zst|gz|lzo))?$/;

/** The hypervisor refused a request (bad template, wrong machine state...): retrying will not help. */
export class HypervisorRefusedError extends BackendRefusedError {
  constructor(message: string) {
    super('vps', message);
    this.name = 'HypervisorRefusedError';
  }
}
