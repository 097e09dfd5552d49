import { ApplicationFailure } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { ROOT_PASSWORD_PURPOSE } from '../../domain/vps/secrets';
import { dropRootPassword, endReinstall, sealedRootPassword } from '../../domain/vps/store';
import type { Providers } from '../../providers';
import type { BackupMode, GuestStatus, MachineState, PowerTaskKind, TaskRef, TaskStatus } from '../../providers/hypervisor.provider';
import { pollUntil } from '../backend-errors';

/** How long a machine may take to show the state its finished task left it in. */
const STATE_SETTLE_MS = 60_000;

/**
 * Activities of the VPS workflows. Each is idempotent: task calls carry a key derived from the
 * operation id (the hypervisor returns the same task for the same key), and the waits only read.
 * Hypervisor refusals fail an activity for good and outages are retried (activities/backend-errors.ts).
 */
export function createVpsActivities({ db, providers, keyring }: { db: Knex; providers: Providers; keyring: Keyring }) {
  const hv = providers.hypervisor;
  const poll = <T>(read: () => Promise<T>, done: (value: T) => boolean) => pollUntil(read, done, hv.pollIntervalMs);

  return {
    /** Orders a start or stop; returns at once with the task. */
    async vpsIssuePower(input: { vmid: number; action: PowerTaskKind; key: string }): Promise<TaskRef> {
      return hv.power(input.vmid, input.action, input.key);
    },

    /** Waits until a hypervisor task has ended, and says how. */
    async vpsAwaitTask(input: { upid: string }): Promise<TaskStatus> {
      return poll(
        () => hv.task(input.upid),
        (t) => t.status !== 'running',
      );
    },

    /**
     * Waits until the machine reports the state (the real state, not the order). Gives up after
     * `STATE_SETTLE_MS` and returns the state it last saw: another action may have moved it since.
     */
    async vpsAwaitState(input: { vmid: number; state: MachineState }): Promise<MachineState> {
      const deadline = Date.now() + STATE_SETTLE_MS;
      let last: MachineState = 'unknown';
      await poll(
        () => hv.status(input.vmid),
        (s) => {
          last = s.state;
          return s.state === input.state || Date.now() > deadline;
        },
      );
      return last;
    },

    /** The machine's addresses, to prove a reinstall kept them. */
    async vpsReadAddresses(input: { vmid: number }): Promise<{ ipv4: string; ipv6: string }> {
      const status = await hv.status(input.vmid);
      return { ipv4: status.ipv4, ipv6: status.ipv6 };
    },

    /**
     * Hands the sealed root password to the hypervisor's reinstall and deletes it. A retry after the
     * hypervisor took it finds the task by its key and needs no password.
     */
    async vpsBeginReinstall(input: { operationId: string; vmid: number; template: string; key: string }): Promise<TaskRef> {
      const prior = await hv.taskByKey(input.key);
      if (prior) {
        await dropRootPassword(db, input.operationId);
        return prior;
      }
      const sealed = await sealedRootPassword(db, input.operationId);
      if (!sealed) throw ApplicationFailure.nonRetryable('the root password of this reinstall is no longer available', 'RootPasswordGone');
      const rootPassword = keyring.decrypt(ROOT_PASSWORD_PURPOSE, sealed);
      const task = await hv.reinstall(input.vmid, { template: input.template, rootPassword }, input.key);
      await dropRootPassword(db, input.operationId);
      return task;
    },

    /** Waits until the guest OS answers (its agent is up). */
    async vpsAwaitGuest(input: { vmid: number }): Promise<GuestStatus> {
      return poll(
        () => hv.guest(input.vmid),
        (g) => g.agentReady,
      );
    },

    /** The reinstalled machine runs, its guest answers, and it kept its addresses. */
    async vpsHealthCheck(input: { vmid: number; ipv4: string; ipv6: string }): Promise<{ ok: boolean; detail: string }> {
      const [status, guest] = await Promise.all([hv.status(input.vmid), hv.guest(input.vmid)]);
      if (status.state !== 'running') return { ok: false, detail: `the machine is ${status.state}, not running` };
      if (!guest.agentReady) return { ok: false, detail: 'the guest agent does not answer' };
      if (guest.ipv4 !== input.ipv4 || guest.ipv6 !== input.ipv6) {
        return { ok: false, detail: `the addresses changed (${guest.ipv4}, ${guest.ipv6}; expected ${input.ipv4}, ${input.ipv6})` };
      }
      return { ok: true, detail: 'running, guest agent answers, addresses kept' };
    },

    /** Clears the reinstalling flag of this operation and drops a password that was never used. */
    async vpsEndReinstall(input: { operationId: string; serviceId: number }): Promise<void> {
      await endReinstall(db, input.operationId);
    },

    /** Queues a backup task; the archive's id is known at once. */
    async vpsStartBackup(input: { vmid: number; mode: BackupMode; key: string }): Promise<TaskRef & { volid: string }> {
      return hv.backup(input.vmid, input.mode, input.key);
    },

    /** Waits until the backup is in the machine's backup list. */
    async vpsAwaitBackupListed(input: { vmid: number; volid: string }): Promise<{ backup_id: string; size_bytes: number; created_at: string }> {
      const list = await poll(
        () => hv.listBackups(input.vmid),
        (backups) => backups.some((b) => b.volid === input.volid),
      );
      const backup = list.find((b) => b.volid === input.volid)!;
      return { backup_id: backup.volid, size_bytes: backup.sizeBytes, created_at: backup.createdAt.toISOString() };
    },

    /** Queues the restore of a backup over the (stopped) machine's disk. */
    async vpsStartRestore(input: { vmid: number; volid: string; key: string }): Promise<TaskRef> {
      return hv.restore(input.vmid, input.volid, input.key);
    },
  };
}

export type VpsActivities = ReturnType<typeof createVpsActivities>;

/** Types the workflows need (they may import activities' types, not providers). */
export type { BackupMode, MachineState, PowerTaskKind } from '../../providers/hypervisor.provider';
