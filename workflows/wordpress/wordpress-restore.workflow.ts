import { upsertMemo } from '@temporalio/workflow';
import type { OperationInput } from '../kit/operation';
import { runOperation } from '../kit/steps';
import { long, SITE_HOST } from './steps';

export interface WordpressRestoreInput extends OperationInput {
  serviceId: number;
  /** A completed backup of the site (checked by the request, again by the activity). */
  backupId: number;
}

/**
 * `wordpress.restore` (SPEC "Hosted sites"): overwrites the site's database and `wp-content/` from
 * a completed backup's archive. The request refused it while a backup ran or another restore was
 * open, and backups and restores of the site wait for this one to end (409). The `restore` step is
 * idempotent (a retry writes the same content); `result` carries `backup_id` and `restored_at`.
 */
export async function wordpressRestoreWorkflow(input: WordpressRestoreInput): Promise<void> {
  const backup = `bkp_${input.backupId}`;
  upsertMemo({ backup });
  const result: Record<string, unknown> = { backup_id: backup };
  await runOperation(input, { backend: SITE_HOST, step: 'restore', result }, async (run) => {
    const done = await run.step('restore', 10, () => long.wordpressRunRestore({ serviceId: input.serviceId, backupId: input.backupId }));
    return { backup_id: backup, restored_at: done.restored_at };
  });
}
