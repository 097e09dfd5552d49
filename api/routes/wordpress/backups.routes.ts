import { open, rm } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { DomainError, notFound } from '../../../domain/errors';
import {
  archivePathOf,
  backupOfDownload,
  backupPlanOf,
  backupRef,
  backupSettings,
  backupsPage,
  claimBackup,
  claimRestore,
  createDownload,
  deleteBackup,
  DOWNLOAD_TTL_SECONDS,
  findBackup,
  nextBackupId,
  putBackupSettings,
  STARTER_BACKUP_PLAN,
  type BackupRow,
} from '../../../domain/wordpress/backups';
import { ApiError } from '../../errors';
import { keysetFetch, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { idParam, listOf, OperationSchema } from '../../schemas';
import { startOperation } from '../../start-operation';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/**
 * A site's backups (SPEC "Hosted sites", DECISIONS "Hosted WordPress"; docs/wordpress.md "Backups"):
 * backup and restore are operations (workflows/wordpress/), the rest answers at once. A download
 * URL is served outside /v1 by the last route here, with no credential: its token is the credential.
 */

/** Where download URLs are served (outside /v1: no credential, not audited, not in OpenAPI). */
export const DOWNLOAD_PATH = '/downloads/wordpress-backups';

const plan = STARTER_BACKUP_PLAN;
const GIB = 1024 ** 3;

const backupParams = z.object({
  id: idParam('svc_1'),
  backup_id: idParam('bkp_1').meta({ description: 'A backup of the site (`bkp_<n>`, from GET /v1/wordpress/{id}/backups)', example: 'bkp_1' }),
});

const BackupSchema = z
  .object({
    object: z.literal('wordpress_backup'),
    id: z.string(),
    kind: z.enum(['manual', 'scheduled']),
    status: z.enum(['running', 'completed', 'failed']),
    size_bytes: z.number().int().nullable().meta({ description: 'The archive’s size once completed' }),
    created_at: z.string(),
  })
  .meta({ id: 'WordpressBackup' });

const SettingsSchema = z
  .object({
    object: z.literal('wordpress_backup_settings'),
    enabled: z.boolean().meta({ description: 'Whether the site gets a scheduled backup every day' }),
    frequency: z.enum(['daily']),
    retention_days: z
      .number()
      .int()
      .meta({ description: `How long scheduled backups are kept (${plan.retentionDays.min} to ${plan.retentionDays.max})` }),
  })
  .meta({ id: 'WordpressBackupSettings' });

const SettingsBody = z.object({
  enabled: z.boolean().meta({ description: 'A scheduled backup every day (`true`), or none' }),
  frequency: z.enum(['daily']).default('daily').meta({ description: 'How often: `daily`' }),
  retention_days: z
    .number()
    .int()
    .meta({
      description: `Days scheduled backups are kept; clamped to the plan's range (${plan.retentionDays.min} to ${plan.retentionDays.max}), the response shows the value applied`,
    }),
});

const DownloadSchema = z
  .object({
    object: z.literal('wordpress_backup_download'),
    url: z
      .string()
      .meta({ description: 'A credential: anyone with it can GET the archive (a `.tar.gz` of `database.sql` and `wp-content/`) until `expires_at`' }),
    expires_at: z.string(),
  })
  .meta({ id: 'WordpressBackupDownload' });

const presentBackup = (b: BackupRow) => ({
  object: 'wordpress_backup' as const,
  id: backupRef(b.id),
  kind: b.kind,
  status: b.status === 'deleted' ? ('failed' as const) : b.status,
  size_bytes: b.size_bytes,
  created_at: iso(b.created_at)!,
});

const presentSettings = (s: { enabled: boolean; frequency: 'daily'; retention_days: number }) => ({ object: 'wordpress_backup_settings' as const, ...s });

const BUSY = {
  status: 409,
  description: 'A backup or restore of the site is in progress, or the site is still being set up or its status refuses the change (`conflict`)',
};

/** The daily allowance's refusal with its `Retry-After` (the domain says when; the header is HTTP's). */
function withRetryAfter(err: unknown): unknown {
  if (err instanceof DomainError && err.code === 'rate_limited' && typeof err.extra.retry_after === 'number') {
    return new ApiError(err.status, err.type, err.code, err.message, err.param, err.extra, { 'Retry-After': String(err.extra.retry_after) });
  }
  return err;
}

export const backupRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/backups',
    operationId: 'createWordpressBackup',
    summary: 'Back up a site',
    description: `The site's database (a \`.sql\` dump) and \`wp-content/\` in one archive. \`202\` with the \`wordpress.backup\` operation, whose \`result.backup_id\` names the backup (listed \`running\` at once) and whose \`result.size_bytes\` is the archive's size once it succeeded. One backup or restore at a time per site: \`409 conflict\`. Manual backups count against the plan's allowance of ${plan.manualPerDay} per UTC day (\`429 rate_limited\`, with \`Retry-After\`) and its storage quota of ${plan.storageBytes / GIB} GiB of backups per site (\`429 quota_exceeded\`: delete backups to make room).`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['A', 'I'],
    params: siteParams,
    responses: [
      { status: 202, description: 'The `wordpress.backup` operation', schema: OperationSchema },
      BUSY,
      { status: 429, description: 'The daily manual-backup allowance is used up (`rate_limited`) or the backups fill the storage quota (`quota_exceeded`)' },
    ],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups', 'a backup');
      const backupId = await nextBackupId(deps.db);
      const backup_id = backupRef(backupId);
      try {
        const accepted = await startOperation(deps, principal, {
          type: 'wordpress.backup',
          input: { serviceId: service.id, backupId },
          resource: { object: 'wordpress', id: formatId('svc', service.id) },
          serviceId: service.id,
          inTransaction: async (trx, operationId) => {
            await claimBackup(trx, {
              serviceId: service.id,
              backupId,
              kind: 'manual',
              operationId,
              path: archivePathOf(deps.config.WORDPRESS_DATA_DIR, service.id, backupId),
              plan: backupPlanOf(service.product),
            });
            // The backup's id is known from the start: on the operation's row as on its answer.
            await trx('operations')
              .where({ id: operationId })
              .update({ result: JSON.stringify({ backup_id }) });
          },
        });
        return { ...accepted, body: { ...accepted.body, result: accepted.body.result ?? { backup_id } } };
      } catch (err) {
        throw withRetryAfter(err);
      }
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/backups',
    operationId: 'listWordpressBackups',
    summary: 'List a site’s backups',
    description: 'Newest first, scheduled and manual, with `status` (`running`, `completed`, `failed`) and `size_bytes` once completed.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of backups, newest first', schema: listOf(BackupSchema, 'WordpressBackupList') }, NOT_READY],
    async handler({ params, query, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups');
      const page = await keysetFetch((after, take) => backupsPage(deps.db, service.id, after === undefined ? undefined : String(after), take), {
        cursors: deps.cursors,
        list: listFingerprint(`wordpress.backups:${service.id}`, {}),
        limit: query.limit,
        cursor: query.cursor,
        keyOf: (row) => row.key,
      });
      return { body: listEnvelope(page.rows.map(presentBackup), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/backups/settings',
    operationId: 'getWordpressBackupSettings',
    summary: 'Get a site’s scheduled-backup settings',
    description: `Whether the site gets a backup every day, and how many days those scheduled backups are kept (${plan.retentionDays.min} to ${plan.retentionDays.max}; manual backups are kept until deleted).`,
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The settings', schema: SettingsSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups');
      return { body: presentSettings(await backupSettings(deps.db, service.id)) };
    },
  }),
  defineRoute({
    method: 'put',
    path: '/v1/wordpress/{id}/backups/settings',
    operationId: 'updateWordpressBackupSettings',
    summary: 'Set a site’s scheduled-backup settings',
    description: `\`enabled\`, \`frequency\` (\`daily\`) and \`retention_days\`, clamped to the plan's range (${plan.retentionDays.min} to ${plan.retentionDays.max}): the response shows the value applied. Scheduled backups older than \`retention_days\` are removed; they do not count against the daily manual-backup allowance.`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    body: SettingsBody,
    exampleBody: { enabled: true, frequency: 'daily', retention_days: 14 },
    responses: [{ status: 200, description: 'The settings as applied', schema: SettingsSchema }, NOT_READY],
    async handler({ params, body, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups', 'changing backup settings');
      return { body: presentSettings(await putBackupSettings(deps.db, service.id, backupPlanOf(service.product), body)) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/wordpress/{id}/backups/{backup_id}',
    operationId: 'deleteWordpressBackup',
    summary: 'Delete a backup',
    description:
      'Removes the archive; its download URLs stop working. A backup being made, or any backup while a restore of the site is in progress: `409 conflict`. A deleted manual backup still counts against the day’s allowance.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['D', 'I'],
    params: backupParams,
    responses: [{ status: 204, description: 'Deleted' }, BUSY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups', 'deleting a backup');
      const archive = await deleteBackup(deps.db, service.id, params.backup_id);
      if (archive) await rm(archive, { force: true });
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/backups/{backup_id}/download',
    operationId: 'createWordpressBackupDownload',
    summary: 'Get a download URL for a backup',
    description: `A URL (a credential: no other is needed) that serves the backup's archive, a \`.tar.gz\` holding \`database.sql\` and \`wp-content/\` (no credentials of the site), for ${DOWNLOAD_TTL_SECONDS / 60} minutes. Only its hash is stored. A backup that is not completed: \`409 conflict\`.`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: [],
    returnsSecret: true,
    params: backupParams,
    responses: [{ status: 200, description: 'The download URL', schema: DownloadSchema }, NOT_READY],
    async handler({ params, principal, deps, req }) {
      const { service } = await siteTarget(deps, principal, params.id, 'backups', 'downloading a backup');
      const backup = await findBackup(deps.db, service.id, params.backup_id);
      const { token, expiresAt } = await createDownload(deps.db, backup);
      // The API's own origin as the client reached it (through the trusted proxies, if any).
      const origin = `${req.protocol}://${req.host}`;
      return { body: { object: 'wordpress_backup_download' as const, url: `${origin}${DOWNLOAD_PATH}/${token}`, expires_at: expiresAt.toISOString() } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/backups/{backup_id}/restore',
    operationId: 'restoreWordpressBackup',
    summary: 'Restore a backup over a site',
    description:
      'Overwrites the site’s database and `wp-content/` with the backup’s. `202` with the `wordpress.restore` operation (`result.backup_id`, and `result.restored_at` once done). Only a completed backup (`409 conflict` otherwise); one backup or restore at a time per site (`409 conflict`).',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['D', 'A', 'I'],
    params: backupParams,
    responses: [{ status: 202, description: 'The `wordpress.restore` operation', schema: OperationSchema }, BUSY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'restore', 'a restore');
      const backup = await findBackup(deps.db, service.id, params.backup_id);
      return startOperation(deps, principal, {
        type: 'wordpress.restore',
        input: { serviceId: service.id, backupId: backup.id },
        resource: { object: 'wordpress', id: formatId('svc', service.id) },
        serviceId: service.id,
        inTransaction: (trx, operationId) => claimRestore(trx, service.id, backup.id, operationId),
      });
    },
  }),
  // Outside /v1: the download URL itself. Its token is the credential (no other is read), the
  // request is neither audited nor rate limited, and any token that opens nothing is a 404.
  defineRoute({
    method: 'get',
    path: `${DOWNLOAD_PATH}/{token}`,
    operationId: 'downloadWordpressBackup',
    summary: 'A backup archive, by its download URL',
    tag: TAG,
    scope: null,
    credential: 'none',
    marks: [],
    internal: true,
    params: z.object({ token: z.string() }),
    responses: [{ status: 200, description: 'The archive (`application/gzip`)' }],
    async handler({ params, deps, res }) {
      const backup = await backupOfDownload(deps.db, params.token);
      if (!backup?.path) throw notFound('download');
      const file = await open(backup.path, 'r').catch(() => null);
      if (!file) throw notFound('download');
      try {
        const { size } = await file.stat();
        res.status(200);
        res.setHeader('Content-Type', 'application/gzip');
        res.setHeader('Content-Length', String(size));
        res.setHeader('Content-Disposition', `attachment; filename="svc_${backup.service_id}-${backupRef(backup.id)}.tar.gz"`);
        res.setHeader('Cache-Control', 'no-store');
        // The body is streamed here; the pipeline then has nothing left to send (ending an ended response does nothing).
        await pipeline(file.createReadStream({ autoClose: false }), res);
      } finally {
        await file.close();
      }
      return { status: 200 };
    },
  }),
];
