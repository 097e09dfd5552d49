import type { Knex } from 'knex';
import { ScheduleOverlapPolicy, ScheduleNotFoundError, type ScheduleSpec } from '@temporalio/client';
import type { Keyring } from '../../common/crypto';
import { randomBase62 } from '../../common/crypto';
import { formatId, newUlidId } from '../../common/ids';
import { iso } from '../../common/time';
import type { TemporalGateway } from '../../infra/temporal';
import { checkTarget, TargetRejected } from '../../infra/webhook-targets';
import { backendUnavailable, notFound, quotaExceeded, validationFailed, type FieldError } from '../errors';
import { planOf, type PlanSettings } from './plans';
import type { TenantRow } from './store';

/**
 * Cron schedules (DECISIONS "Serverless", cron, modelled on QStash): each one Temporal Schedule
 * whose every firing is a `serverlessCronRunWorkflow` run (workflows/serverless/) that POSTs the
 * schedule's body to its destination, signed like a webhook with the schedule's secret, once (no
 * retry). The schedule row in PostgreSQL is the truth: a firing whose row is deleted sends nothing,
 * so a deletion takes effect at its answer even if Temporal is slow to drop the schedule.
 *
 * In the Temporal UI a schedule is `serverless-cron:<id>` and its runs
 * `serverless-cron-run:<id>-<time>`, with CloudAccountId and CloudResourceId (the schedule id).
 */
export const CRON_SECRET_PURPOSE = 'serverless-cron-secret';
export const CRON_RUN_WORKFLOW = 'serverlessCronRunWorkflow';
export const MAX_BODY_BYTES = 64 * 1024;

export const temporalScheduleId = (id: string) => `serverless-cron:${id}`;
export const runWorkflowIdPrefix = (id: string) => `serverless-cron-run:${id}`;

export interface ScheduleRow {
  id: string;
  service_id: number;
  destination: string;
  cron: string | null;
  interval_seconds: number | null;
  body: string;
  secret_sealed: string;
  created_at: Date;
  deleted_at: Date | null;
}

export interface CronDeps {
  db: Knex;
  keyring: Keyring;
  temporal: TemporalGateway;
  plans: PlanSettings;
  allowInsecureTargets: boolean;
}

const FIELD_RANGES: Array<[string, number, number]> = [
  ['minute', 0, 59],
  ['hour', 0, 23],
  ['day of month', 1, 31],
  ['month', 1, 12],
  ['day of week', 0, 7],
];
const NAMES: Record<number, string[]> = {
  3: ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'],
  4: ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'],
};

/** Why a 5-field cron expression (UTC) is not one; null when it is. Checked here so a bad one is a clear 400, not Temporal's message. */
export function cronProblem(expression: string): string | null {
  const fields = expression.trim().split(/\s+/);
  if (fields.length !== 5) return 'must have 5 fields: minute hour day-of-month month day-of-week (UTC)';
  for (let i = 0; i < 5; i++) {
    const [name, min, max] = FIELD_RANGES[i];
    const value = (text: string): number | null => {
      const named = NAMES[i]?.indexOf(text.toUpperCase());
      if (named !== undefined && named >= 0) return i === 3 ? named + 1 : named;
      if (!/^\d{1,2}$/.test(text)) return null;
      const n = Number(text);
      return n >= min && n <= max ? n : null;
    };
    for (const part of fields[i].split(',')) {
      const m = /^(\*|([^-/]+)(?:-([^-/]+))?)(?:\/(\d{1,2}))?$/.exec(part);
      if (!m) return `the ${name} field "${fields[i]}" is not valid`;
      if (m[1] !== '*') {
        const from = value(m[2]);
        const to = m[3] === undefined ? from : value(m[3]);
        if (from === null || to === null || to < from) return `the ${name} field "${fields[i]}" is out of range (${min}-${max})`;
      }
      if (m[4] !== undefined && Number(m[4]) < 1) return `the ${name} field's step must be at least 1`;
    }
  }
  return null;
}

export interface ScheduleInput {
  destination?: unknown;
  cron?: unknown;
  interval_seconds?: unknown;
  body?: unknown;
}

/** The checked schedule, or `400 validation_failed` naming every bad field. */
async function checkInput(
  deps: CronDeps,
  tenant: TenantRow,
  input: ScheduleInput,
): Promise<{ destination: string; cron: string | null; interval: number | null; body: string }> {
  const errors: FieldError[] = [];
  const minInterval = planOf(tenant.plan, deps.plans).limits.min_interval_seconds;
  let destination = '';
  if (typeof input.destination !== 'string' || input.destination.length === 0) errors.push({ param: 'destination', message: 'is required: an https URL' });
  else {
    try {
      destination = await checkTarget(input.destination, { allowInsecure: deps.allowInsecureTargets });
    } catch (err) {
      if (!(err instanceof TargetRejected)) throw err;
      errors.push({ param: 'destination', message: err.message });
    }
  }
  const hasCron = input.cron !== undefined && input.cron !== null;
  const hasInterval = input.interval_seconds !== undefined && input.interval_seconds !== null;
  if (hasCron === hasInterval) errors.push({ param: 'cron', message: 'give exactly one of cron and interval_seconds' });
  if (hasCron) {
    const problem = typeof input.cron === 'string' ? cronProblem(input.cron) : 'must be a string of 5 fields';
    if (problem) errors.push({ param: 'cron', message: problem });
  }
  if (
    hasInterval &&
    (!Number.isInteger(input.interval_seconds) || (input.interval_seconds as number) < minInterval || (input.interval_seconds as number) > 31_536_000)
  ) {
    errors.push({ param: 'interval_seconds', message: `must be an integer from ${minInterval} (limits.min_interval_seconds) to 31536000` });
  }
  if (input.body !== undefined && input.body !== null && typeof input.body !== 'string') errors.push({ param: 'body', message: 'must be a string' });
  const body = typeof input.body === 'string' ? input.body : '';
  if (Buffer.byteLength(body) > MAX_BODY_BYTES) errors.push({ param: 'body', message: `must be at most ${MAX_BODY_BYTES} bytes` });
  if (errors.length) throw validationFailed(errors);
  return {
    destination,
    cron: hasCron ? (input.cron as string).trim().split(/\s+/).join(' ') : null,
    interval: hasInterval ? (input.interval_seconds as number) : null,
    body,
  };
}

const specOf = (row: Pick<ScheduleRow, 'cron' | 'interval_seconds'>): ScheduleSpec =>
  row.cron ? { cronExpressions: [row.cron] } : { intervals: [{ every: row.interval_seconds! * 1_000 }] };

/** A new schedule: the row, then its Temporal Schedule (undone when Temporal does not take it: `503`). */
export async function createSchedule(
  deps: CronDeps,
  tenant: TenantRow,
  input: ScheduleInput,
): Promise<{ row: ScheduleRow; secret: string; nextRunAt: Date | null }> {
  const checked = await checkInput(deps, tenant, input);
  const limit = planOf(tenant.plan, deps.plans).limits.max_schedules;
  const secret = `cs_${randomBase62(40)}`;
  const id = newUlidId('sched');
  const row = await deps.db.transaction(async (trx) => {
    await trx('serverless_tenants').where({ service_id: tenant.service_id }).forUpdate().first();
    const [{ n }] = await trx('serverless_cron_schedules').where({ service_id: tenant.service_id }).whereNull('deleted_at').count({ n: '*' });
    if (Number(n) >= limit) throw quotaExceeded(`The plan allows ${limit} schedules; delete one first.`);
    const [inserted] = await trx('serverless_cron_schedules')
      .insert({
        id,
        service_id: tenant.service_id,
        destination: checked.destination,
        cron: checked.cron,
        interval_seconds: checked.interval,
        body: checked.body,
        secret_sealed: deps.keyring.encrypt(CRON_SECRET_PURPOSE, secret),
      })
      .returning('*');
    return inserted as ScheduleRow;
  });
  try {
    await deps.temporal.withDeadline(5_000, () =>
      deps.temporal.client.schedule.create({
        scheduleId: temporalScheduleId(id),
        spec: specOf(row),
        policies: { overlap: ScheduleOverlapPolicy.ALLOW_ALL, catchupWindow: '1 minute' },
        action: {
          type: 'startWorkflow',
          workflowType: CRON_RUN_WORKFLOW,
          workflowId: runWorkflowIdPrefix(id),
          taskQueue: deps.temporal.taskQueue,
          args: [{ scheduleId: id }],
          typedSearchAttributes: deps.temporal.searchAttributes({
            operationType: 'serverless.cron.run',
            accountId: formatId('cus', tenant.account_id),
            resourceId: id,
          }),
          memo: { schedule: id, account: formatId('cus', tenant.account_id), destination: new URL(row.destination).host },
        },
        memo: { schedule: id, account: formatId('cus', tenant.account_id), tenant: tenant.handle },
      }),
    );
  } catch (err) {
    await deps.db('serverless_cron_schedules').where({ id }).delete();
    throw Object.assign(backendUnavailable('serverless', 'scheduler'), { cause: err });
  }
  return { row, secret, nextRunAt: await nextRunOf(deps.temporal, id) };
}

/** When the schedule fires next, from Temporal (null when it cannot be asked in time). */
export async function nextRunOf(temporal: TemporalGateway, id: string): Promise<Date | null> {
  try {
    const described = await temporal.withDeadline(2_000, () => temporal.client.schedule.getHandle(temporalScheduleId(id)).describe());
    return described.info.nextActionTimes[0] ?? null;
  } catch {
    return null;
  }
}

export async function findSchedule(db: Knex, tenant: TenantRow, id: string): Promise<ScheduleRow> {
  const row = await db('serverless_cron_schedules').where({ id, service_id: tenant.service_id }).whereNull('deleted_at').first();
  if (!row) throw notFound('schedule');
  return row;
}

/** Newest first (the platform's list order), `limit` rows after the `after` id when given. */
export async function listSchedules(db: Knex, tenant: TenantRow): Promise<ScheduleRow[]> {
  return db('serverless_cron_schedules').where({ service_id: tenant.service_id }).whereNull('deleted_at').orderBy('id', 'desc');
}

/**
 * Deletes the schedule: the row first (a firing that starts after this answer sends nothing), then
 * the Temporal Schedule (if Temporal does not answer, the data plane's reaper removes it later).
 */
export async function deleteSchedule(deps: Pick<CronDeps, 'db' | 'temporal'>, tenant: TenantRow, id: string): Promise<void> {
  const n = await deps
    .db('serverless_cron_schedules')
    .where({ id, service_id: tenant.service_id })
    .whereNull('deleted_at')
    .update({ deleted_at: deps.db.fn.now() });
  if (n === 0) throw notFound('schedule');
  await removeTemporalSchedule(deps.temporal, id).catch(() => undefined);
}

/** Removes a schedule from Temporal; one that is gone already is fine. */
export async function removeTemporalSchedule(temporal: TemporalGateway, id: string): Promise<void> {
  try {
    await temporal.withDeadline(5_000, () => temporal.client.schedule.getHandle(temporalScheduleId(id)).delete());
  } catch (err) {
    if (!(err instanceof ScheduleNotFoundError)) throw err;
  }
}

export const presentSchedule = (row: ScheduleRow, nextRunAt: Date | null, secret?: string) => ({
  object: 'cron_schedule' as const,
  id: row.id,
  destination: row.destination,
  cron: row.cron,
  interval_seconds: row.interval_seconds,
  body: row.body,
  next_run_at: iso(nextRunAt),
  created_at: iso(row.created_at),
  ...(secret ? { secret } : {}),
});

export type RunOutcome = 'delivered' | 'failed' | 'skipped' | 'gone';

export interface FireDeps {
  db: Knex;
  keyring: Keyring;
  plans: PlanSettings;
  /** Makes the POST (the webhook delivery client: SSRF rules, deadline, no redirects). */
  post(req: { url: string; body: string; headers: Record<string, string> }): Promise<{ delivered: boolean; status: number | null; error: string | null }>;
  sign(secret: string, body: string): string;
}

/**
 * One firing of a schedule, at most one POST per run key (the run's workflow id): the run is
 * claimed in PostgreSQL first, under the tenant's lock, so a retried activity (a worker lost mid-way)
 * never POSTs twice, and concurrent firings see each other's counts. A deleted schedule or a tenant
 * whose service is not active sends nothing. On a hard-capped (free) plan a firing beyond the month's
 * included executions is recorded as `skipped` and not sent; every other firing counts one
 * execution, delivered or not.
 */
export async function fireSchedule(deps: FireDeps, input: { scheduleId: string; runKey: string; scheduledAt: Date }): Promise<RunOutcome> {
  const claim = await deps.db.transaction(async (trx) => {
    const row = await trx('serverless_cron_schedules as c')
      .join('serverless_tenants as t', 't.service_id', 'c.service_id')
      .join('services as s', 's.id', 'c.service_id')
      .where('c.id', input.scheduleId)
      .select('c.*', 't.plan', 's.status')
      .first();
    if (!row || row.deleted_at || row.status !== 'active') return { outcome: 'gone' as const };
    await trx('serverless_tenants').where({ service_id: row.service_id }).forUpdate().first();
    const earlier = await trx('serverless_cron_runs').where({ run_key: input.runKey }).first();
    if (earlier) return { outcome: (earlier.outcome === 'sending' ? 'interrupted' : earlier.outcome) as RunOutcome | 'interrupted' };
    const plan = planOf(row.plan, deps.plans);
    const month = new Date().toISOString().slice(0, 7);
    const [{ used }] = await trx('serverless_usage_days').where({ service_id: row.service_id }).where('day', '>=', `${month}-01`).sum({ used: 'executions' });
    const skip = plan.hard_cap && Number(used ?? 0) >= (plan.included.executions ?? 0);
    const day = new Date().toISOString().slice(0, 10);
    await trx('serverless_cron_runs').insert({
      run_key: input.runKey,
      schedule_id: row.id,
      service_id: row.service_id,
      scheduled_at: input.scheduledAt,
      outcome: skip ? 'skipped' : 'sending',
    });
    await trx('serverless_usage_days')
      .insert({ service_id: row.service_id, day, [skip ? 'skipped' : 'executions']: 1 })
      .onConflict(['service_id', 'day'])
      .merge({ [skip ? 'skipped' : 'executions']: trx.raw('serverless_usage_days.?? + 1', [skip ? 'skipped' : 'executions']) });
    return skip ? { outcome: 'skipped' as const } : { outcome: 'send' as const, row: row as ScheduleRow };
  });
  if (claim.outcome === 'interrupted') {
    // The worker was lost between the claim and the outcome: the POST may have been made; never twice.
    await deps
      .db('serverless_cron_runs')
      .where({ run_key: input.runKey, outcome: 'sending' })
      .update({ outcome: 'failed', error: 'the run was interrupted; it is not repeated' });
    return 'failed';
  }
  if (claim.outcome !== 'send') return claim.outcome;
  const secret = deps.keyring.decrypt(CRON_SECRET_PURPOSE, claim.row.secret_sealed);
  const result = await deps.post({
    url: claim.row.destination,
    body: claim.row.body,
    headers: {
      'Content-Type': 'text/plain; charset=utf-8',
      'User-Agent': 'Cloud-Cron/1.0',
      'Cloud-Schedule': claim.row.id,
      'Cloud-Signature': deps.sign(secret, claim.row.body),
    },
  });
  const outcome: RunOutcome = result.delivered ? 'delivered' : 'failed';
  await deps.db('serverless_cron_runs').where({ run_key: input.runKey }).update({ outcome, status_code: result.status, error: result.error });
  return outcome;
}
