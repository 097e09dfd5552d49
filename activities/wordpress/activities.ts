import { rm } from 'node:fs/promises';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { iso } from '../../common/time';
import { DomainError } from '../../domain/errors';
import type { Providers } from '../../providers';
import { BackendGoneError } from '../../providers/errors';
import {
  archivePathOf,
  backupById,
  backupPlanOf,
  backupRef,
  claimBackup,
  completeBackup,
  failBackupIfRunning,
  nextBackupId,
  type BackupKind,
} from '../../domain/wordpress/backups';
import { heartbeating } from '../backend-errors';

/** What a backup run ended with: `completed` with its size, or the state it was found in. */
export type BackupOutcome =
  { status: 'completed'; backup_id: string; size_bytes: number; created_at: string } | { status: 'failed' | 'deleted' | 'gone'; backup_id: string };

/** What claiming a backup from inside a workflow gave: the backup, or why not (`rate_limited`, `quota_exceeded`, `conflict`). */
export type BackupClaimOutcome = { ok: true; backupId: number } | { ok: false; code: string; message: string };

/**
 * The hosted sites' activities (workflows/wordpress/): backups and restores on the site's backend,
 * each idempotent by the backup's id (a retry writes the same archive again, or finds it done).
 */
export function createWordpressActivities({ db, config, providers }: { db: Knex; config: Config; providers: Providers }) {
  const wp = providers.wordpress;

  return {
    /**
     * Makes backup `backupId`'s archive (`database.sql` and `wp-content/`, written whole or not at
     * all) and records it `completed` with its size. A backup already completed answers as such (a
     * retry after a lost answer); one failed or deleted meanwhile is left as it is.
     */
    async wordpressRunBackup(input: { serviceId: number; backupId: number }): Promise<BackupOutcome> {
      const ref = backupRef(input.backupId);
      const row = await backupById(db, input.backupId);
      if (!row) return { status: 'gone', backup_id: ref };
      if (row.status === 'completed') return { status: 'completed', backup_id: ref, size_bytes: row.size_bytes ?? 0, created_at: iso(row.created_at)! };
      if (row.status !== 'running') return { status: row.status, backup_id: ref };
      const archive = row.path ?? archivePathOf(config.WORDPRESS_DATA_DIR, input.serviceId, input.backupId);
      const { sizeBytes } = await heartbeating(() => wp.backup(input.serviceId, archive));
      if (!(await completeBackup(db, input.backupId, sizeBytes))) {
        const now = await backupById(db, input.backupId);
        // Another attempt of this activity completed it first: that archive is this one.
        if (now?.status === 'completed') return { status: 'completed', backup_id: ref, size_bytes: now.size_bytes ?? 0, created_at: iso(now.created_at)! };
        // Failed (its run was given up) or deleted while the archive was written: nothing may keep it.
        await rm(archive, { force: true });
        return { status: now?.status === 'failed' || now?.status === 'deleted' ? now.status : 'gone', backup_id: ref };
      }
      return { status: 'completed', backup_id: ref, size_bytes: sizeBytes, created_at: iso(row.created_at)! };
    },

    /**
     * Ends a backup run whatever its outcome: a backup still `running` becomes `failed` (the row
     * stays, without an archive). Idempotent; a completed backup is untouched.
     */
    async wordpressSettleBackup(input: { backupId: number }): Promise<{ status: string }> {
      const before = await backupById(db, input.backupId);
      const row = await failBackupIfRunning(db, input.backupId);
      if (before?.status === 'running' && row?.status === 'failed' && row.path) await rm(row.path, { force: true });
      return { status: row?.status ?? 'gone' };
    },

    /** Overwrites the site's database and `wp-content/` from a completed backup's archive. Idempotent (a second run writes the same). */
    async wordpressRunRestore(input: { serviceId: number; backupId: number }): Promise<{ backup_id: string; restored_at: string }> {
      const row = await backupById(db, input.backupId);
      if (!row || row.service_id !== input.serviceId || row.status !== 'completed' || !row.path) {
        throw new BackendGoneError('wordpress', 'backup', `The backup ${backupRef(input.backupId)} is no longer a completed backup of this site.`);
      }
      await heartbeating(() => wp.restore(input.serviceId, row.path!));
      return { backup_id: backupRef(input.backupId), restored_at: new Date().toISOString() };
    },

    /**
     * Claims a backup of the site for a workflow's own step (the recipe apply's `backup`), as the
     * backup endpoint does: one at a time, and a `manual` one within the plan's daily allowance and
     * storage quota. Idempotent by the operation: a retry finds the backup it claimed. Then run it
     * with wordpressRunBackup and end it with wordpressSettleBackup.
     */
    async wordpressClaimBackup(input: { serviceId: number; operationId: string; kind: BackupKind }): Promise<BackupClaimOutcome> {
      const mine = await db('wordpress_backups').where({ service_id: input.serviceId, operation_id: input.operationId }).first('id');
      if (mine) return { ok: true, backupId: Number(mine.id) };
      const service = await db('services').where({ id: input.serviceId }).first('product');
      const backupId = await nextBackupId(db);
      try {
        await db.transaction((trx) =>
          claimBackup(trx, {
            serviceId: input.serviceId,
            backupId,
            kind: input.kind,
            operationId: input.operationId,
            path: archivePathOf(config.WORDPRESS_DATA_DIR, input.serviceId, backupId),
            plan: backupPlanOf(service?.product),
          }),
        );
        return { ok: true, backupId };
      } catch (err) {
        if (err instanceof DomainError && (err.status === 409 || err.status === 429)) return { ok: false, code: err.code, message: err.message };
        throw err;
      }
    },
  };
}

export type WordpressActivities = ReturnType<typeof createWordpressActivities>;
