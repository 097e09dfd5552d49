import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { ServerlessActivities } from '../../activities/serverless/activities';
import type { RunOutcome } from '../../domain/serverless/cron';

/** Set by Temporal on every run a Schedule starts: when the firing was due. */
const SCHEDULED_START = defineSearchAttributeKey('TemporalScheduledStartTime', SearchAttributeType.DATETIME);

const { fireCronSchedule } = proxyActivities<ServerlessActivities>({
  startToCloseTimeout: '1 minute',
  // Retries cover the worker or the database going away; the activity's claim keeps it to one POST.
  retry: { maximumAttempts: 5, initialInterval: '1 second', maximumInterval: '10 seconds' },
});

/**
 * One firing of a serverless cron schedule (domain/serverless/cron.ts): started by the schedule's
 * Temporal Schedule (`serverless-cron:<id>`) as `serverless-cron-run:<id>-<time>`. It POSTs once,
 * or records why not (`skipped` past a free plan's quota, `gone` when the schedule was deleted).
 */
export async function serverlessCronRunWorkflow(input: { scheduleId: string }): Promise<RunOutcome> {
  const info = workflowInfo();
  const scheduledAt = info.typedSearchAttributes.get(SCHEDULED_START) ?? info.runStartTime;
  return fireCronSchedule({ scheduleId: input.scheduleId, runKey: info.workflowId, scheduledAt: scheduledAt.toISOString() });
}
