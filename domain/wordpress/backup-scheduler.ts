import { rm } from 'node:fs/promises';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import type { TemporalGateway } from '../../infra/temporal';
import {
  archivePathOf,
  backupRef,
  claimBackup,
  failBackupIfRunning,
  nextBackupId,
  pruneBackups,
  runningScheduledBackups,
  scheduledBackupWorkflowId,
  settleOrphanedBackups,
  siteBusy,
  sitesDueForBackup,
  STARTER_BACKUP_PLAN,
} from './backups';

/** A scheduled backup still `running` this long after it was made is checked against its workflow. */
const SETTLE_AFTER_MS = 2 * 60 * 1000;

/**
 * Daily backups of the sites whose backup settings are `enabled` (docs/wordpress.md "Backups"),
 * beside the worker, every WORDPRESS_BACKUP_SCHEDULE_INTERVAL (not at start: a restarted worker
 * catches up at its first pass). A pass:
 * 1. settles backups left `running` by a run that is over (an operation gone or closed, a scheduled
 *    run whose workflow ended or never started);
 * 2. for each active, built site whose last scheduled backup is a day old (or that has none; an
 *    hour after a failed attempt), claims a `scheduled` backup as a request would (one at a time:
 *    a site with a backup or restore in progress is left for the next pass; no daily allowance or
 *    quota) and starts `wordpressScheduledBackupWorkflow` for it;
 * 3. prunes what is past its time: scheduled backups (and failed ones of either kind) older than
 *    the site's `retention_days`, with their archives; manual backups stay until deleted.
 */
export class WordpressBackupScheduler extends PeriodicService {
  readonly name = 'wordpress-backup-scheduler';

  constructor(
    private readonly deps: {
      db: Knex;
      temporal: TemporalGateway;
      logger: Logger;
      /** `WORDPRESS_DATA_DIR`: where the archives go. */
      dataDir: string;
      intervalMs: number;
    },
  ) {
    super({ intervalMs: deps.intervalMs });
  }

  async pass(): Promise<void> {
    const { logger } = this.deps;
    for (const [what, step] of [
      ['settle', () => this.settle()],
      ['start', () => this.startDue()],
      ['prune', () => this.prune()],
    ] as const) {
      try {
        await step();
      } catch (err) {
        logger.warn({ err: (err as Error).message, step: what }, 'wordpress backup scheduler: a step failed; next pass retries');
      }
    }
  }

  /** Backups left `running` by runs that are over: failed. */
  private async settle(): Promise<void> {
    const { db, temporal } = this.deps;
    await settleOrphanedBackups(db);
    for (const backup of await runningScheduledBackups(db, SETTLE_AFTER_MS)) {
      let over: boolean;
      try {
        const described = await temporal.handle(scheduledBackupWorkflowId(backup.service_id, backup.id)).describe();
        over = described.status.name !== 'RUNNING';
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
        over = true;
      }
      if (over) {
        const row = await failBackupIfRunning(db, backup.id);
        if (row?.status === 'failed' && row.path) await rm(row.path, { force: true });
      }
    }
  }

  private async startDue(): Promise<void> {
    for (const site of await sitesDueForBackup(this.deps.db)) {
      try {
        await this.startOne(site.serviceId, site.accountId);
      } catch (err) {
        this.deps.logger.warn({ service: formatId('svc', site.serviceId), err: (err as Error).message }, 'scheduled backup not started; next pass retries');
      }
    }
  }

  /** Claims a scheduled backup of the site and starts its workflow; null when the site is busy. */
  async startOne(serviceId: number, accountId: number): Promise<number | null> {
    const { db, temporal, dataDir } = this.deps;
    const backupId = await nextBackupId(db);
    const claimed = await db.transaction(async (trx) => {
      if (await siteBusy(trx, serviceId)) return false;
      await claimBackup(trx, {
        serviceId,
        backupId,
        kind: 'scheduled',
        operationId: null,
        path: archivePathOf(dataDir, serviceId, backupId),
        plan: STARTER_BACKUP_PLAN,
      });
      return true;
    });
    if (!claimed) return null;
    const site = formatId('svc', serviceId);
    const account = formatId('cus', accountId);
    try {
      await temporal.client.workflow.start('wordpressScheduledBackupWorkflow', {
        workflowId: scheduledBackupWorkflowId(serviceId, backupId),
        taskQueue: temporal.taskQueue,
        args: [{ serviceId, backupId }],
        typedSearchAttributes: temporal.searchAttributes({ operationType: 'wordpress.backup', accountId: account, resourceId: site }),
        memo: { operation_type: 'wordpress.backup', kind: 'scheduled', account, resource: `wordpress ${site}`, backup: backupRef(backupId) },
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return backupId;
      // Not started: the attempt is recorded failed (the next one waits an hour).
      await failBackupIfRunning(db, backupId);
      throw err;
    }
    return backupId;
  }

  private async prune(): Promise<void> {
    const { paths } = await pruneBackups(this.deps.db);
    for (const file of paths) await rm(file, { force: true });
  }
}
