import { createHash } from 'node:crypto';
import path from 'node:path';
import type { Knex } from 'knex';
import { randomBase62 } from '../../common/crypto';
import { formatId, parseNumericId } from '../../common/ids';
import { conflict, DomainError, notFound, quotaExceeded } from '../errors';

/**
 * Hosted sites' backups (SPEC "Hosted sites", DECISIONS "Hosted WordPress"; docs/wordpress.md
 * "Backups"): the only SQL on `wordpress_backups` and `wordpress_backup_downloads`, and the rules
 * a backup or a restore takes in the transaction that starts it.
 *
 * - A backup is a row `bkp_<n>` (`manual` or `scheduled`), `running` from the transaction that
 *   starts it, then `completed` with its size or `failed` (the row stays). Its archive, a `.tar.gz`
 *   of `database.sql` and `wp-content/`, is `<WORDPRESS_DATA_DIR>/backups/svc-<n>/bkp_<n>.tar.gz`.
 * - One backup or restore at a time per site: starts lock the site's row, then refuse while a
 *   backup is `running` (also a partial unique index) or a `wordpress.restore` operation is open.
 * - Manual backups count against the plan's daily allowance (per UTC day; failed ones do not count,
 *   deleted ones still do) and its storage quota (completed archives of both kinds). Scheduled
 *   backups count against neither, but their archives fill the quota that manual ones are refused by.
 * - A deleted manual backup stays as a `deleted` row (hidden, no archive) until the scheduler
 *   purges it two days later, so that deleting does not give the day's allowance back.
 */

export type BackupKind = 'manual' | 'scheduled';
export type BackupStatus = 'running' | 'completed' | 'failed';

export interface BackupRow {
  id: number;
  service_id: number;
  kind: BackupKind;
  status: BackupStatus | 'deleted';
  size_bytes: number | null;
  path: string | null;
  operation_id: string | null;
  created_at: Date;
  finished_at: Date | null;
}

/** A plan's backup limits (DECISIONS: the starter plan's; docs/wordpress.md). */
export interface BackupPlan {
  /** Manual backups per site and UTC day. */
  manualPerDay: number;
  /** Bytes of completed archives (manual and scheduled) past which a manual backup is refused. */
  storageBytes: number;
  /** `retention_days` is clamped to this range. */
  retentionDays: { min: number; max: number };
}

const GIB = 1024 ** 3;
export const STARTER_BACKUP_PLAN: BackupPlan = { manualPerDay: 5, storageBytes: 5 * GIB, retentionDays: { min: 1, max: 30 } };
const PLANS: Record<string, BackupPlan> = { 'wordpress-starter': STARTER_BACKUP_PLAN };

/** The backup limits of a site's product (the starter plan's for any product without its own). */
export function backupPlanOf(product: string | null | undefined): BackupPlan {
  return (product && PLANS[product]) || STARTER_BACKUP_PLAN;
}

/** How long a download URL works. */
export const DOWNLOAD_TTL_SECONDS = 3600;
/** Scheduled backups are daily (the one `frequency`). */
export const SCHEDULE_EVERY_MS = 24 * 3600 * 1000;
/** After a failed scheduled backup, the next attempt waits this long. */
export const SCHEDULE_RETRY_AFTER_MS = 3600 * 1000;
/** A `deleted` row is purged this long after its backup was made (its day's allowance is over). */
const TOMBSTONE_KEEP_MS = 2 * 24 * 3600 * 1000;

export const backupRef = (id: number) => formatId('bkp', id);

/** Where the archive of backup `id` of the site is written (on the site's host). */
export function archivePathOf(dataDir: string, serviceId: number, backupId: number): string {
  return path.join(dataDir, 'backups', `svc-${serviceId}`, `${backupRef(backupId)}.tar.gz`);
}

/** The id of a scheduled backup's workflow (not an operation: no one asked for it), as the Temporal UI lists it. */
export const scheduledBackupWorkflowId = (serviceId: number, backupId: number) => `wordpress-backup-${formatId('svc', serviceId)}-${backupRef(backupId)}`;

const rowOf = (row: Record<string, unknown>): BackupRow => ({
  ...(row as unknown as BackupRow),
  id: Number(row.id),
  service_id: Number(row.service_id),
  size_bytes: row.size_bytes === null || row.size_bytes === undefined ? null : Number(row.size_bytes),
});

/** A backup of the site by its public id (`bkp_<n>`); 404 for a malformed id, another site's, or a deleted one. */
export async function findBackup(db: Knex | Knex.Transaction, serviceId: number, rawId: string): Promise<BackupRow> {
  const id = parseNumericId('bkp', rawId);
  if (id === null) throw notFound('backup');
  const row = await db('wordpress_backups').where({ id, service_id: serviceId }).whereNot({ status: 'deleted' }).first();
  if (!row) throw notFound('backup');
  return rowOf(row);
}

export async function backupById(db: Knex | Knex.Transaction, id: number): Promise<BackupRow | null> {
  const row = await db('wordpress_backups').where({ id }).first();
  return row ? rowOf(row) : null;
}

/**
 * One page of the site's backups, newest first (`created_at`, then id), without deleted ones.
 * `after` is a key `keyOf` made.
 */
export async function backupsPage(db: Knex, serviceId: number, after: string | undefined, take: number): Promise<Array<BackupRow & { key: string }>> {
  const qb = db('wordpress_backups')
    .where({ service_id: serviceId })
    .whereNot({ status: 'deleted' })
    .select('*', db.raw(`to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_key`));
  if (after !== undefined) {
    const cut = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)\|(\d{1,18})$/.exec(after);
    if (!cut) return [];
    qb.whereRaw('(created_at, id) < (?::timestamptz, ?::bigint)', [cut[1], cut[2]]);
  }
  const rows = await qb
    .orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ])
    .limit(take);
  return rows.map((r: Record<string, unknown>) => ({ ...rowOf(r), key: `${r.created_key as string}|${r.id as string}` }));
}

/** A backup id taken before the operation's transaction, so that the workflow's input and the 202 carry it. */
export async function nextBackupId(db: Knex): Promise<number> {
  const { rows } = await db.raw(`select nextval(pg_get_serial_sequence('wordpress_backups', 'id')) as id`);
  return Number(rows[0].id);
}

/**
 * Marks failed the running backups (of one site, or all) whose operation is over or gone: a start
 * whose workflow Temporal never took (its operation row was taken back), a run closed without an
 * outcome. Scheduled backups (no operation) are settled by the scheduler from their workflow's state.
 */
export async function settleOrphanedBackups(db: Knex | Knex.Transaction, serviceId?: number): Promise<number> {
  const qb = db('wordpress_backups')
    .where({ status: 'running' })
    .whereNotNull('operation_id')
    .whereNotExists(function () {
      this.select(db.raw('1'))
        .from('operations')
        .whereRaw('operations.id = wordpress_backups.operation_id')
        .whereIn('operations.status', ['pending', 'running']);
    });
  if (serviceId !== undefined) qb.andWhere({ service_id: serviceId });
  return qb.update({ status: 'failed', finished_at: db.fn.now() });
}

/**
 * Takes the site for a backup or a restore, in the transaction that starts it: locks the site's row
 * (starts on one site run one after the other), settles orphaned backups, and refuses (409) while
 * a backup runs or a restore other than `exceptOperation` is open.
 */
async function takeSite(trx: Knex.Transaction, serviceId: number, exceptOperation: string | null): Promise<void> {
  const site = await trx('wordpress_sites').where({ service_id: serviceId }).forUpdate().first('service_id');
  if (!site) throw notFound('wordpress');
  await settleOrphanedBackups(trx, serviceId);
  const running = await trx('wordpress_backups').where({ service_id: serviceId, status: 'running' }).first('id');
  if (running) throw conflict(`A backup of this site (${backupRef(Number(running.id))}) is in progress; wait for it to end.`);
  const restoring = trx('operations').where({ service_id: serviceId, type: 'wordpress.restore' }).whereIn('status', ['pending', 'running']);
  if (exceptOperation) restoring.whereNot({ id: exceptOperation });
  if (await restoring.first('id')) throw conflict('A restore of this site is in progress; wait for it to end.');
}

/** Whether the site has a backup running or a restore open (the scheduler skips it then). */
export async function siteBusy(trx: Knex.Transaction, serviceId: number): Promise<boolean> {
  try {
    await takeSite(trx, serviceId, null);
    return false;
  } catch (err) {
    if (err instanceof DomainError && err.status === 409) return true;
    throw err;
  }
}

/** Seconds until the next UTC midnight (when the daily allowance starts again). */
export function secondsToUtcMidnight(now = new Date()): number {
  const midnight = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((midnight - now.getTime()) / 1000));
}

/** The daily manual allowance is used up: `429 rate_limited` (the API adds `Retry-After`). */
export const allowanceExceeded = (plan: BackupPlan, retryAfter: number) =>
  new DomainError(
    429,
    'rate_limit_error',
    'rate_limited',
    `This site has had its ${plan.manualPerDay} manual backups of today (UTC); the allowance starts again at midnight UTC, in ${retryAfter} s.`,
    null,
    { retry_after: retryAfter },
  );

function formatBytes(bytes: number): string {
  return bytes >= GIB ? `${(bytes / GIB).toFixed(bytes % GIB === 0 ? 0 : 1)} GiB` : `${Math.ceil(bytes / 1024 ** 2)} MiB`;
}

/** Refuses a manual backup past the plan's daily allowance (429 rate_limited) or storage quota (429 quota_exceeded). */
async function checkManualLimits(trx: Knex.Transaction, serviceId: number, plan: BackupPlan): Promise<void> {
  const today = await trx('wordpress_backups')
    .where({ service_id: serviceId, kind: 'manual' })
    .whereNot({ status: 'failed' })
    .whereRaw(`created_at >= date_trunc('day', now() at time zone 'UTC') at time zone 'UTC'`)
    .count<{ count: string }[]>('* as count');
  if (Number(today[0].count) >= plan.manualPerDay) throw allowanceExceeded(plan, secondsToUtcMidnight());
  const used = await trx('wordpress_backups').where({ service_id: serviceId, status: 'completed' }).sum<{ sum: string | null }[]>('size_bytes as sum');
  const bytes = Number(used[0].sum ?? 0);
  if (bytes >= plan.storageBytes) {
    throw quotaExceeded(
      `This site's backups use ${formatBytes(bytes)} of its ${formatBytes(plan.storageBytes)} of backup storage; delete backups to make room.`,
    );
  }
}

export interface BackupClaim {
  serviceId: number;
  backupId: number;
  kind: BackupKind;
  /** The operation that runs it (null for a scheduled backup). */
  operationId: string | null;
  /** Where its archive goes (`archivePathOf`). */
  path: string;
  /** The plan's limits, checked for a manual backup. */
  plan: BackupPlan;
}

/**
 * Claims a backup in the transaction that starts it: the site taken (409 while a backup or restore
 * runs), a manual one within the plan's limits (429), then its `running` row. A second start that
 * raced past the checks meets the partial unique index: 409 too.
 */
export async function claimBackup(trx: Knex.Transaction, claim: BackupClaim): Promise<BackupRow> {
  await takeSite(trx, claim.serviceId, null);
  if (claim.kind === 'manual') await checkManualLimits(trx, claim.serviceId, claim.plan);
  try {
    const [row] = await trx('wordpress_backups')
      .insert({
        id: claim.backupId,
        service_id: claim.serviceId,
        kind: claim.kind,
        status: 'running',
        path: claim.path,
        operation_id: claim.operationId,
      })
      .returning('*');
    return rowOf(row);
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw conflict('A backup of this site is in progress; wait for it to end.');
    throw err;
  }
}

/**
 * Gives back what a `wordpress.backup` request claimed when no workflow ran its operation to the
 * end (OPERATION_TYPES' `claims`): its backup, still running, is failed. Idempotent.
 */
export async function releaseBackupClaim(trx: Knex.Transaction, operationId: string): Promise<void> {
  await trx('wordpress_backups').where({ operation_id: operationId, status: 'running' }).update({ status: 'failed', finished_at: trx.fn.now() });
}

/**
 * Takes the site for a restore from `backupId` in the transaction of its operation (`operationId`,
 * already inserted): 409 while a backup runs or another restore is open, or when the backup is no
 * longer completed.
 */
export async function claimRestore(trx: Knex.Transaction, serviceId: number, backupId: number, operationId: string): Promise<void> {
  await takeSite(trx, serviceId, operationId);
  const backup = await trx('wordpress_backups').where({ id: backupId, service_id: serviceId }).first('status');
  if (!backup || backup.status === 'deleted') throw notFound('backup');
  if (backup.status !== 'completed') throw conflict('Only a completed backup can be restored.');
}

/** Records a finished archive; false when the backup is no longer running (failed or deleted meanwhile). */
export async function completeBackup(db: Knex, backupId: number, sizeBytes: number): Promise<boolean> {
  const updated = await db('wordpress_backups')
    .where({ id: backupId, status: 'running' })
    .update({ status: 'completed', size_bytes: sizeBytes, finished_at: db.fn.now() });
  return updated > 0;
}

/** Fails the backup if it still runs (a run that ended without completing it). Returns its row. */
export async function failBackupIfRunning(db: Knex, backupId: number): Promise<BackupRow | null> {
  await db('wordpress_backups').where({ id: backupId, status: 'running' }).update({ status: 'failed', finished_at: db.fn.now() });
  return backupById(db, backupId);
}

/**
 * Deletes a backup (409 while it runs or while a restore of the site is open): a manual one that
 * did not fail stays as a hidden `deleted` row (it still counts against the day's allowance), any
 * other goes; its download URLs go with it. Returns the archive's path, for the caller to remove.
 */
export async function deleteBackup(db: Knex, serviceId: number, rawId: string): Promise<string | null> {
  return db.transaction(async (trx) => {
    await trx('wordpress_sites').where({ service_id: serviceId }).forUpdate().first('service_id');
    const backup = await findBackup(trx, serviceId, rawId);
    if (backup.status === 'running') throw conflict('This backup is still being made; delete it once it has ended.');
    const restoring = await trx('operations').where({ service_id: serviceId, type: 'wordpress.restore' }).whereIn('status', ['pending', 'running']).first('id');
    if (restoring) throw conflict('A restore of this site is in progress; delete backups once it has ended.');
    await trx('wordpress_backup_downloads').where({ backup_id: backup.id }).delete();
    if (backup.kind === 'manual' && backup.status !== 'failed') {
      await trx('wordpress_backups').where({ id: backup.id }).update({ status: 'deleted', path: null });
    } else {
      await trx('wordpress_backups').where({ id: backup.id }).delete();
    }
    return backup.path;
  });
}

// ---- settings ------------------------------------------------------------------------------------

export interface BackupSettings {
  enabled: boolean;
  frequency: 'daily';
  retention_days: number;
}

export function clampRetention(plan: BackupPlan, days: number): number {
  return Math.min(plan.retentionDays.max, Math.max(plan.retentionDays.min, Math.trunc(days)));
}

export async function backupSettings(db: Knex, serviceId: number): Promise<BackupSettings> {
  const site = await db('wordpress_sites').where({ service_id: serviceId }).first('backups_enabled', 'backups_frequency', 'backups_retention_days');
  if (!site) throw notFound('wordpress');
  return { enabled: site.backups_enabled, frequency: 'daily', retention_days: Number(site.backups_retention_days) };
}

/** Stores the settings, `retention_days` clamped to the plan's range; returns what applies. */
export async function putBackupSettings(db: Knex, serviceId: number, plan: BackupPlan, settings: BackupSettings): Promise<BackupSettings> {
  const retention = clampRetention(plan, settings.retention_days);
  await db('wordpress_sites')
    .where({ service_id: serviceId })
    .update({ backups_enabled: settings.enabled, backups_frequency: settings.frequency, backups_retention_days: retention });
  return backupSettings(db, serviceId);
}

// ---- download URLs -------------------------------------------------------------------------------

const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');
/** The shape of a download token (anything else is an unknown URL). */
const TOKEN_RE = /^[A-Za-z0-9]{43}$/;

/** A new download token for a completed backup (409 otherwise), valid DOWNLOAD_TTL_SECONDS; only its hash is stored. */
export async function createDownload(db: Knex, backup: BackupRow): Promise<{ token: string; expiresAt: Date }> {
  if (backup.status !== 'completed' || !backup.path) throw conflict('Only a completed backup can be downloaded.');
  const token = randomBase62(43);
  const expiresAt = new Date(Date.now() + DOWNLOAD_TTL_SECONDS * 1000);
  await db('wordpress_backup_downloads').insert({ token_sha256: tokenHash(token), backup_id: backup.id, service_id: backup.service_id, expires_at: expiresAt });
  return { token, expiresAt };
}

/** The backup a download token opens: completed, token unexpired; null otherwise (unknown, expired, deleted). */
export async function backupOfDownload(db: Knex, token: string): Promise<BackupRow | null> {
  if (!TOKEN_RE.test(token)) return null;
  const row = await db('wordpress_backup_downloads as d')
    .join('wordpress_backups as b', 'b.id', 'd.backup_id')
    .where({ 'd.token_sha256': tokenHash(token), 'b.status': 'completed' })
    .where('d.expires_at', '>', db.fn.now())
    .first('b.*');
  return row ? rowOf(row) : null;
}

// ---- the scheduler's queries ---------------------------------------------------------------------

/** Built sites with scheduled backups on whose last scheduled backup is a day old (or that have none), and no recent failed attempt. */
export async function sitesDueForBackup(db: Knex): Promise<Array<{ serviceId: number; accountId: number }>> {
  const rows: Array<{ service_id: string; account_id: string }> = await db('wordpress_sites as w')
    .join('services as s', 's.id', 'w.service_id')
    .where({ 'w.backups_enabled': true, 's.status': 'active' })
    .whereNotNull('w.ip')
    .whereNotExists(function () {
      this.select(db.raw('1'))
        .from('wordpress_backups as b')
        .whereRaw('b.service_id = w.service_id')
        .where('b.kind', 'scheduled')
        .where(function () {
          this.where(function () {
            this.whereIn('b.status', ['running', 'completed']).whereRaw(`b.created_at > now() - ?::interval`, [`${SCHEDULE_EVERY_MS} milliseconds`]);
          }).orWhere(function () {
            this.where('b.status', 'failed').whereRaw(`b.created_at > now() - ?::interval`, [`${SCHEDULE_RETRY_AFTER_MS} milliseconds`]);
          });
        });
    })
    .orderBy('w.service_id')
    .select('w.service_id', 's.account_id');
  return rows.map((r) => ({ serviceId: Number(r.service_id), accountId: Number(r.account_id) }));
}

/** Running scheduled backups started more than `olderThanMs` ago (the scheduler asks Temporal whether their run still goes). */
export async function runningScheduledBackups(db: Knex, olderThanMs: number): Promise<BackupRow[]> {
  const rows = await db('wordpress_backups')
    .where({ kind: 'scheduled', status: 'running' })
    .whereRaw(`created_at < now() - ?::interval`, [`${olderThanMs} milliseconds`]);
  return rows.map(rowOf);
}

/**
 * Removes what is past its time: scheduled and failed backups older than their site's
 * `retention_days` (manual completed ones stay until deleted), `deleted` rows past their day,
 * download tokens a day after they expired. Returns the archives to remove.
 */
export async function pruneBackups(db: Knex): Promise<{ pruned: number; paths: string[] }> {
  const { rows } = await db.raw(
    `delete from wordpress_backups b using wordpress_sites w
      where w.service_id = b.service_id
        and ((b.kind = 'scheduled' and b.status = 'completed') or b.status = 'failed')
        and b.created_at < now() - make_interval(days => w.backups_retention_days)
      returning b.path`,
  );
  const tombstones = await db('wordpress_backups')
    .where({ status: 'deleted' })
    .whereRaw(`created_at < now() - ?::interval`, [`${TOMBSTONE_KEEP_MS} milliseconds`])
    .delete();
  await db('wordpress_backup_downloads').whereRaw(`expires_at < now() - interval '1 day'`).delete();
  return { pruned: rows.length + tombstones, paths: rows.map((r: { path: string | null }) => r.path).filter((p: string | null): p is string => !!p) };
}
