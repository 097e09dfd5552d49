import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { calls, DATABASE_INSTANCE, waits } from './steps';

export interface DbaasBackupInput extends OperationInput {
  serviceId: number;
  /** The provider's name of the service's instance. */
  instance: string;
}

/**
 * `dbaas.backup`: starts a dump with the engine's own tool and resolves when the backup is on the
 * instance's list as completed (with its size), not when the dump is accepted.
 */
export async function dbaasBackupWorkflow(input: DbaasBackupInput): Promise<void> {
  const result: Record<string, unknown> = { backup_id: null };
  await runOperation(input, { backend: DATABASE_INSTANCE, step: 'backup', result }, async (run) => {
    const started = await calls.dbaasStartBackup({ instance: input.instance, key: `${input.operationId}:backup` });
    run.result = { ...run.result, backup_id: started.backup_id };
    await run.progress(20);
    const done = await waits.dbaasAwaitBackup({ instance: input.instance, backupId: started.backup_id });
    if (done.status !== 'completed') throw new StepFailed('backup', `the dump of backup ${started.backup_id} did not complete`);
    return { backup_id: done.backup_id, size_bytes: done.size_bytes, created_at: done.created_at };
  });
}
