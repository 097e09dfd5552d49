import type { Providers } from '../../providers';
import type { DbBackupStatus } from '../../providers/dbaas.provider';
import { pollUntil } from '../backend-errors';

/** A backup as the workflows see it (dates as ISO strings: activity results travel as JSON). */
export interface BackupView {
  backup_id: string;
  status: DbBackupStatus;
  size_bytes: number | null;
  created_at: string;
}

/**
 * Activities of the DBaaS workflows. Each is idempotent: the backup call carries a key derived
 * from the operation id (the instance returns the same backup for the same key), and the wait only
 * reads. Instance refusals fail an activity for good and outages are retried (activities/backend-errors.ts).
 * No password ever passes through here.
 */
export function createDbaasActivities({ providers }: { providers: Providers }) {
  const dbaas = providers.dbaas;

  return {
    /** Starts a dump with the engine's tool; returns at once with the backup (`running`). */
    async dbaasStartBackup(input: { instance: string; key: string }): Promise<BackupView> {
      const b = await dbaas.startBackup(input.instance, input.key);
      return { backup_id: b.id, status: b.status, size_bytes: b.sizeBytes, created_at: b.createdAt.toISOString() };
    },

    /** Waits until the backup is on the instance's list as completed or failed (missing counts as failed). */
    async dbaasAwaitBackup(input: { instance: string; backupId: string }): Promise<BackupView> {
      const list = await pollUntil(
        () => dbaas.listBackups(input.instance),
        (backups) => backups.find((b) => b.id === input.backupId)?.status !== 'running',
        dbaas.pollIntervalMs,
      );
      const b = list.find((x) => x.id === input.backupId);
      if (!b) return { backup_id: input.backupId, status: 'failed', size_bytes: null, created_at: new Date().toISOString() };
      return { backup_id: b.id, status: b.status, size_bytes: b.sizeBytes, created_at: b.createdAt.toISOString() };
    },
  };
}

export type DbaasActivities = ReturnType<typeof createDbaasActivities>;
