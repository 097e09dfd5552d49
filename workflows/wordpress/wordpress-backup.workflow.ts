import { ApplicationFailure, CancellationScope, upsertMemo } from '@temporalio/workflow';
import type { BackupOutcome } from '../../activities/wordpress/activities';
import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { bookkeeping, long, SITE_HOST } from './steps';

export interface WordpressBackupInput extends OperationInput {
  serviceId: number;
  /** The backup's row, `running` since the request's transaction (`bkp_<n>`). */
  backupId: number;
}

export interface WordpressScheduledBackupInput {
  serviceId: number;
  backupId: number;
}

const ref = (backupId: number) => `bkp_${backupId}`;

function failure(done: BackupOutcome): string {
  if (done.status === 'completed') return '';
  return done.status === 'deleted' || done.status === 'gone'
    ? `The backup ${done.backup_id} was removed before it completed.`
    : `The backup ${done.backup_id} was given up before it completed.`;
}

/**
 * `wordpress.backup` (SPEC "Hosted sites"): the site's database dump and `wp-content/` in one
 * `.tar.gz` on its host. The request made the backup's row (`running`, `result.backup_id`); the
 * `backup` step writes the archive and records it `completed` with its size, which the result
 * carries. Whatever the outcome, the row does not stay `running`: a failed or cancelled run leaves
 * it `failed`. The run's memo names the backup for operators (`backup`, `kind`).
 */
export async function wordpressBackupWorkflow(input: WordpressBackupInput): Promise<void> {
  const backup = ref(input.backupId);
  upsertMemo({ backup, kind: 'manual' });
  const ids = { serviceId: input.serviceId, backupId: input.backupId };
  const result: Record<string, unknown> = { backup_id: backup };
  await runOperation(
    input,
    { backend: SITE_HOST, step: 'backup', result, cleanup: () => bookkeeping.wordpressSettleBackup({ backupId: input.backupId }) },
    async (run) => {
      const done = await run.step('backup', 10, () => long.wordpressRunBackup(ids));
      if (done.status !== 'completed') throw new StepFailed('backup', failure(done));
      return { backup_id: backup, size_bytes: done.size_bytes, created_at: done.created_at };
    },
  );
}

/**
 * A scheduled backup (the backup scheduler, domain/wordpress/backup-scheduler.ts): the same step
 * as `wordpress.backup`, for a backup no one asked for, hence no operation. Its workflow id
 * (`wordpress-backup-svc_<n>-bkp_<m>`), search attributes (`CloudOperationType` wordpress.backup,
 * the account, the site) and memo (`kind: scheduled`) say so in the Temporal UI. The run fails when
 * the backup does; its row is left `failed` either way.
 */
export async function wordpressScheduledBackupWorkflow(input: WordpressScheduledBackupInput): Promise<BackupOutcome> {
  try {
    const done = await long.wordpressRunBackup(input);
    if (done.status !== 'completed') throw ApplicationFailure.nonRetryable(failure(done), 'BackupNotCompleted');
    return done;
  } finally {
    await CancellationScope.nonCancellable(() => bookkeeping.wordpressSettleBackup({ backupId: input.backupId }));
  }
}
