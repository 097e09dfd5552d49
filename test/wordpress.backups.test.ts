import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { extract as extractTar } from 'tar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWordpressActivities } from '../activities/wordpress/activities';
import { archivePathOf } from '../domain/wordpress/backups';
import { WordpressBackupScheduler } from '../domain/wordpress/backup-scheduler';
import { createApiKey, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { storedOperation, waitFor } from './orders.support';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * Site backups and restores on the simulated WordPress backend and the Temporal dev server: the
 * endpoints, the `wordpress.backup` and `wordpress.restore` workflows, the download URL, the limits
 * (one at a time, the daily allowance, the storage quota) and the scheduler's pass. Simulated work
 * takes time here (SIM_DELAY_SCALE 0.5: a backup takes about half a second), so that a backup is
 * still running when a second request comes.
 */
let stack: Stack;
let api: ReturnType<typeof siteApi>;
let dataDir: string;
let site: TestSite;

const GIB = 1024 ** 3;

async function settled(operationId: string) {
  return waitFor(
    () => storedOperation(stack, operationId),
    (o) => o?.status === 'succeeded' || o?.status === 'failed',
    30_000,
  );
}

/** Starts a backup of the site and waits for its operation; returns the finished operation. */
async function backUp(s: TestSite) {
  const started = await api.post(`/v1/wordpress/${s.id}/backups`);
  expect(started.status, started.text).toBe(202);
  const op = await settled(started.body.id);
  expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
  return { ...op, backupId: started.body.result.backup_id as string };
}

/** Inserts a backup row as if made earlier (`daysAgo` days before now). */
async function insertBackup(s: TestSite, row: { kind?: string; status?: string; size_bytes?: number | null; daysAgo?: number; path?: string | null }) {
  const [inserted] = await stack
    .db('wordpress_backups')
    .insert({
      service_id: s.serviceId,
      kind: row.kind ?? 'manual',
      status: row.status ?? 'completed',
      size_bytes: row.size_bytes === undefined ? 1000 : row.size_bytes,
      path: row.path ?? null,
      created_at: stack.db.raw(`now() - make_interval(days => ?)`, [row.daysAgo ?? 0]),
      finished_at: stack.db.fn.now(),
    })
    .returning('id');
  return Number(inserted.id);
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'wp-backups-test-'));
  stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0.5', WORDPRESS_DATA_DIR: dataDir, OPERATION_CACHE_TTL: '100ms' } });
  api = siteApi(stack);
  site = await createSite(stack);
}, 120_000);

afterAll(async () => {
  await stack?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('backups', () => {
  it('a backup runs as an operation: result.backup_id at once, completed with its size, one at a time', async () => {
    const started = await api.post(`/v1/wordpress/${site.id}/backups`);
    expect(started.status, started.text).toBe(202);
    expect(started.headers.get('location')).toBe(`/v1/operations/${started.body.id}`);
    expect(started.body).toMatchObject({
      type: 'wordpress.backup',
      resource: { object: 'wordpress', id: site.id },
      result: { backup_id: expect.stringMatching(/^bkp_\d+$/) },
    });
    const backupId = started.body.result.backup_id;

    // While it runs: listed `running`, and a second backup is refused.
    const listed = await api.get(`/v1/wordpress/${site.id}/backups`);
    expect(listed.body.data[0]).toMatchObject({ object: 'wordpress_backup', id: backupId, kind: 'manual', status: 'running', size_bytes: null });
    const second = await api.post(`/v1/wordpress/${site.id}/backups`);
    expect(second.status, second.text).toBe(409);
    expect(second.body.error.code).toBe('conflict');
    // A restore neither, nor deleting the running backup.
    const restoring = await api.post(`/v1/wordpress/${site.id}/backups/${backupId}/restore`);
    expect(restoring.status).toBe(409);
    expect((await api.del(`/v1/wordpress/${site.id}/backups/${backupId}`)).status).toBe(409);

    const op = await settled(started.body.id);
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    expect(op.result).toMatchObject({ backup_id: backupId, size_bytes: expect.any(Number) });
    expect(op.result.size_bytes).toBeGreaterThan(0);
    const after = await api.get(`/v1/wordpress/${site.id}/backups`);
    expect(after.body.data[0]).toMatchObject({ id: backupId, status: 'completed', size_bytes: op.result.size_bytes });
    const archive = archivePathOf(dataDir, site.serviceId, Number(backupId.slice(4)));
    expect(statSync(archive).size).toBe(op.result.size_bytes);
    // The operation's row names the backup from the start, and the workflow its run.
    const stored = await storedOperation(stack, started.body.id);
    expect(stored.result.backup_id).toBe(backupId);
  });

  it('lists newest first, scheduled and manual, with pagination', async () => {
    const older = await insertBackup(site, { kind: 'scheduled', daysAgo: 3 });
    const { backupId: newest } = await backUp(site);
    const all = await api.get(`/v1/wordpress/${site.id}/backups?limit=100`);
    expect(all.status).toBe(200);
    const ids = all.body.data.map((b: { id: string }) => b.id);
    expect(ids[0]).toBe(newest);
    expect(ids.at(-1)).toBe(`bkp_${older}`);
    expect(all.body.data.at(-1)).toMatchObject({ kind: 'scheduled', status: 'completed' });
    const created = all.body.data.map((b: { created_at: string }) => b.created_at);
    expect([...created].sort().reverse()).toEqual(created);
    // One at a time: the pages put together are the list.
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { data: Array<{ id: string }>; next_cursor: string | null } } = await api.get(
        `/v1/wordpress/${site.id}/backups?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      seen.push(...page.body.data.map((b) => b.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(ids);
  });

  it('a download URL serves the archive: a .tar.gz of database.sql and wp-content/, without a credential, for an hour', async () => {
    const { backupId } = await backUp(site);
    const made = await api.post(`/v1/wordpress/${site.id}/backups/${backupId}/download`);
    expect(made.status, made.text).toBe(200);
    expect(made.body).toMatchObject({ object: 'wordpress_backup_download', url: expect.stringMatching(/\/downloads\/wordpress-backups\/[A-Za-z0-9]{43}$/) });
    expect(made.headers.get('cache-control')).toBe('no-store');
    const expires = Date.parse(made.body.expires_at) - Date.now();
    expect(expires).toBeGreaterThan(3500_000);
    expect(expires).toBeLessThanOrEqual(3600_000);

    const res = await fetch(made.body.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/gzip');
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(bytes.length).toBe(Number(res.headers.get('content-length')));
    const dir = mkdtempSync(path.join(tmpdir(), 'wp-download-'));
    try {
      await writeFile(path.join(dir, 'backup.tar.gz'), bytes);
      await mkdir(path.join(dir, 'out'));
      await extractTar({ file: path.join(dir, 'backup.tar.gz'), cwd: path.join(dir, 'out') });
      expect(readdirSync(path.join(dir, 'out')).sort()).toEqual(['database.sql', 'wp-content']);
      expect(statSync(path.join(dir, 'out', 'wp-content')).isDirectory()).toBe(true);
      const dump = await readFile(path.join(dir, 'out', 'database.sql'), 'utf8');
      expect(dump.length).toBeGreaterThan(0);
      // Credential-free: no database password of the site in it.
      const siteRow = await stack.db('wordpress_sites').where({ service_id: site.serviceId }).first();
      expect(dump).not.toContain(siteRow.db_password_sealed);
      expect(dump).not.toMatch(/DB_PASSWORD/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // The token is stored hashed only.
    const token = made.body.url.split('/').pop();
    const rows = await stack.db('wordpress_backup_downloads');
    expect(JSON.stringify(rows)).not.toContain(token);

    // Expired: 404 in the error envelope.
    await stack.db('wordpress_backup_downloads').update({ expires_at: stack.db.raw(`now() - interval '1 second'`) });
    const expired = await fetch(made.body.url);
    expect(expired.status).toBe(404);
    expect(((await expired.json()) as { error: unknown }).error).toMatchObject({ code: 'not_found', request_id: expect.stringMatching(/^req_/) });
    // Unknown and malformed tokens too.
    for (const bad of ['A'.repeat(43), 'not-a-token', 'x'.repeat(300)]) {
      const unknown = await fetch(`${stack.url}/downloads/wordpress-backups/${bad}`);
      expect(unknown.status, bad).toBe(404);
      expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('not_found');
    }
  });

  it('only a completed backup is downloaded or restored (409); unknown and malformed ids are 404', async () => {
    const failed = await insertBackup(site, { status: 'failed', size_bytes: null, daysAgo: 1 });
    expect((await api.post(`/v1/wordpress/${site.id}/backups/bkp_${failed}/download`)).status).toBe(409);
    const restore = await api.post(`/v1/wordpress/${site.id}/backups/bkp_${failed}/restore`);
    expect(restore.status).toBe(409);
    expect(restore.body.error.code).toBe('conflict');
    for (const bad of ['bkp_999999', 'nonsense', 'svc_1']) {
      expect((await api.post(`/v1/wordpress/${site.id}/backups/${bad}/restore`)).status, bad).toBe(404);
      expect((await api.post(`/v1/wordpress/${site.id}/backups/${bad}/download`)).status, bad).toBe(404);
      expect((await api.del(`/v1/wordpress/${site.id}/backups/${bad}`)).status, bad).toBe(404);
    }
  });

  it('a restore brings the content of the backup back', async () => {
    const wp = stack.api.deps.providers.wordpress;
    await wp.updateOptions(site.serviceId, { blogdescription: 'Before the change' });
    const { backupId } = await backUp(site);
    await wp.updateOptions(site.serviceId, { blogdescription: 'After the change' });
    expect(await wp.getOption(site.serviceId, 'blogdescription')).toBe('After the change');

    const started = await api.post(`/v1/wordpress/${site.id}/backups/${backupId}/restore`);
    expect(started.status, started.text).toBe(202);
    expect(started.body).toMatchObject({ type: 'wordpress.restore', resource: { object: 'wordpress', id: site.id } });
    // One restore at a time, and no backup meanwhile.
    expect((await api.post(`/v1/wordpress/${site.id}/backups/${backupId}/restore`)).status).toBe(409);
    expect((await api.post(`/v1/wordpress/${site.id}/backups`)).status).toBe(409);
    expect((await api.del(`/v1/wordpress/${site.id}/backups/${backupId}`)).status).toBe(409);
    const op = await settled(started.body.id);
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    expect(op.result).toMatchObject({ backup_id: backupId, restored_at: expect.any(String) });
    expect(await wp.getOption(site.serviceId, 'blogdescription')).toBe('Before the change');
  });

  it('deleting a backup removes its archive and its download URLs', async () => {
    const { backupId } = await backUp(site);
    const archive = archivePathOf(dataDir, site.serviceId, Number(backupId.slice(4)));
    expect(existsSync(archive)).toBe(true);
    const url = (await api.post(`/v1/wordpress/${site.id}/backups/${backupId}/download`)).body.url;
    const deleted = await api.del(`/v1/wordpress/${site.id}/backups/${backupId}`);
    expect(deleted.status, deleted.text).toBe(204);
    expect(existsSync(archive)).toBe(false);
    expect((await fetch(url)).status).toBe(404);
    const listed = await api.get(`/v1/wordpress/${site.id}/backups?limit=100`);
    expect(listed.body.data.map((b: { id: string }) => b.id)).not.toContain(backupId);
    expect((await api.del(`/v1/wordpress/${site.id}/backups/${backupId}`)).status).toBe(404);
  });

  it('settings: read, and written with retention_days clamped to 1..30', async () => {
    const read = await api.get(`/v1/wordpress/${site.id}/backups/settings`);
    expect(read.status).toBe(200);
    expect(read.body).toEqual({ object: 'wordpress_backup_settings', enabled: true, frequency: 'daily', retention_days: 7 });
    const high = await api.put(`/v1/wordpress/${site.id}/backups/settings`, { enabled: false, frequency: 'daily', retention_days: 90 });
    expect(high.status, high.text).toBe(200);
    expect(high.body).toEqual({ object: 'wordpress_backup_settings', enabled: false, frequency: 'daily', retention_days: 30 });
    const low = await api.put(`/v1/wordpress/${site.id}/backups/settings`, { enabled: true, frequency: 'daily', retention_days: 0 });
    expect(low.body).toMatchObject({ enabled: true, retention_days: 1 });
    expect((await api.get(`/v1/wordpress/${site.id}/backups/settings`)).body.retention_days).toBe(1);
    const weekly = await api.put(`/v1/wordpress/${site.id}/backups/settings`, { enabled: true, frequency: 'weekly', retention_days: 7 });
    expect(weekly.status).toBe(400);
    expect(weekly.body.error).toMatchObject({ code: 'validation_failed', param: 'frequency' });
    const fraction = await api.put(`/v1/wordpress/${site.id}/backups/settings`, { enabled: true, frequency: 'daily', retention_days: 1.5 });
    expect(fraction.body.error).toMatchObject({ code: 'validation_failed', param: 'retention_days' });
    await api.put(`/v1/wordpress/${site.id}/backups/settings`, { enabled: true, frequency: 'daily', retention_days: 7 });
  });
});

describe('failures and retries', () => {
  it('a backup the site host cannot make fails its operation at the backup step; the row stays failed, without an archive', async () => {
    const s = await createSite(stack);
    // The site is gone from the backend (BackendGoneError): not retried.
    await stack.db('sim_wordpress_sites').where({ service_id: s.serviceId }).delete();
    const started = await api.post(`/v1/wordpress/${s.id}/backups`);
    expect(started.status, started.text).toBe(202);
    const op = await settled(started.body.id);
    expect(op.status).toBe('failed');
    expect(op.error).toMatchObject({ code: 'upstream_error', step: 'backup' });
    expect(op.result).toMatchObject({ backup_id: started.body.result.backup_id });
    const listed = await api.get(`/v1/wordpress/${s.id}/backups`);
    expect(listed.body.data[0]).toMatchObject({ id: started.body.result.backup_id, status: 'failed', size_bytes: null });
    expect(existsSync(archivePathOf(dataDir, s.serviceId, Number(started.body.result.backup_id.slice(4))))).toBe(false);
  });

  it('the backup activity is idempotent: a second run finds the backup completed, a settle after it changes nothing', async () => {
    const s = await createSite(stack);
    const activities = createWordpressActivities(stack.api.deps);
    // The operation a workflow's own backup step belongs to (a recipe apply's), open while it runs.
    await stack
      .db('operations')
      .insert({ id: 'op_test_claim', account_id: stack.owner.accountId, type: 'wordpress.recipe_apply', status: 'running', service_id: s.serviceId });
    const claimed = await activities.wordpressClaimBackup({ serviceId: s.serviceId, operationId: 'op_test_claim', kind: 'manual' });
    expect(claimed.ok).toBe(true);
    // A retry of the claim finds the same backup.
    expect(await activities.wordpressClaimBackup({ serviceId: s.serviceId, operationId: 'op_test_claim', kind: 'manual' })).toEqual(claimed);
    const backupId = (claimed as { backupId: number }).backupId;
    const first = await activities.wordpressRunBackup({ serviceId: s.serviceId, backupId });
    const again = await activities.wordpressRunBackup({ serviceId: s.serviceId, backupId });
    expect(first).toMatchObject({ status: 'completed', size_bytes: expect.any(Number) });
    expect(again).toEqual(first);
    expect(await activities.wordpressSettleBackup({ backupId })).toEqual({ status: 'completed' });
    // While it ran, a second claim was refused as the endpoint refuses it.
    await stack.db('wordpress_backups').where({ id: backupId }).update({ status: 'running' });
    expect(await activities.wordpressClaimBackup({ serviceId: s.serviceId, operationId: 'op_other', kind: 'manual' })).toMatchObject({
      ok: false,
      code: 'conflict',
    });
    await stack.db('wordpress_backups').where({ id: backupId }).update({ status: 'completed' });
    await stack.db('operations').where({ id: 'op_test_claim' }).update({ status: 'succeeded' });
  });
});

describe('limits', () => {
  it('5 manual backups per site and UTC day: the 6th is 429 rate_limited with Retry-After; scheduled and failed ones do not count', async () => {
    const s = await createSite(stack);
    for (let i = 0; i < 4; i++) await insertBackup(s, {});
    await insertBackup(s, { status: 'failed', size_bytes: null });
    await insertBackup(s, { kind: 'scheduled' });
    await insertBackup(s, { daysAgo: 1 });
    const fifth = await backUp(s);
    expect(fifth.status).toBe('succeeded');
    // Deleting does not give the allowance back.
    expect((await api.del(`/v1/wordpress/${s.id}/backups/${fifth.backupId}`)).status).toBe(204);
    const sixth = await api.post(`/v1/wordpress/${s.id}/backups`);
    expect(sixth.status, sixth.text).toBe(429);
    expect(sixth.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited', retry_after: expect.any(Number) });
    expect(Number(sixth.headers.get('retry-after'))).toBe(sixth.body.error.retry_after);
    expect(sixth.body.error.retry_after).toBeLessThanOrEqual(86_400);
    // Nothing was left behind by the refusal.
    expect(await stack.db('operations').where({ service_id: s.serviceId, type: 'wordpress.backup' }).count('* as n').first()).toMatchObject({ n: 1 });
  });

  it('the storage quota (5 GiB of backups per site): 429 quota_exceeded', async () => {
    const s = await createSite(stack);
    const big = await insertBackup(s, { kind: 'scheduled', size_bytes: 5 * GIB, daysAgo: 1 });
    const refused = await api.post(`/v1/wordpress/${s.id}/backups`);
    expect(refused.status, refused.text).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'quota_exceeded' });
    expect(refused.body.error.message).toMatch(/5 GiB/);
    // Room made: accepted again.
    expect((await api.del(`/v1/wordpress/${s.id}/backups/bkp_${big}`)).status).toBe(204);
    expect((await backUp(s)).status).toBe('succeeded');
  });

  it('another account’s site or backup is 404; a suspended site takes no backup or restore (409)', async () => {
    const [acct] = await stack.db('accounts').insert({ name: 'Other' }).returning('id');
    const otherOwner = await createUser(stack.db, acct.id, { isOwner: true });
    const theirs = await createSite(stack, { accountId: acct.id });
    const theirBackup = await insertBackup(theirs, {});
    for (const res of [
      await api.get(`/v1/wordpress/${theirs.id}/backups`),
      await api.post(`/v1/wordpress/${theirs.id}/backups`),
      await api.get(`/v1/wordpress/${theirs.id}/backups/settings`),
      await api.put(`/v1/wordpress/${theirs.id}/backups/settings`, { enabled: false, frequency: 'daily', retention_days: 3 }),
      await api.post(`/v1/wordpress/${theirs.id}/backups/bkp_${theirBackup}/download`),
      await api.post(`/v1/wordpress/${theirs.id}/backups/bkp_${theirBackup}/restore`),
      await api.del(`/v1/wordpress/${theirs.id}/backups/bkp_${theirBackup}`),
      // Their backup under my site's id.
      await api.post(`/v1/wordpress/${site.id}/backups/bkp_${theirBackup}/download`),
      await api.del(`/v1/wordpress/${site.id}/backups/bkp_${theirBackup}`),
    ]) {
      expect(res.status, res.text).toBe(404);
    }
    expect(await stack.db('wordpress_backups').where({ id: theirBackup }).first()).toMatchObject({ status: 'completed' });
    // Their own key sees it.
    const theirKey = await createApiKey(stack.db, acct.id, otherOwner.userId, { scopes: ['wordpress:read'] });
    expect((await siteApi(stack, theirKey.token).get(`/v1/wordpress/${theirs.id}/backups`)).status).toBe(200);

    const suspended = await createSite(stack, { status: 'suspended' });
    const kept = await insertBackup(suspended, { daysAgo: 1 });
    const refused = await api.post(`/v1/wordpress/${suspended.id}/backups`);
    expect(refused.status, refused.text).toBe(409);
    expect(refused.body.error.code).toBe('conflict');
    expect((await api.post(`/v1/wordpress/${suspended.id}/backups/bkp_${kept}/restore`)).status).toBe(409);
    expect((await api.get(`/v1/wordpress/${suspended.id}/backups`)).status).toBe(200);
  });
});

describe('scheduled backups', () => {
  it('a pass starts one scheduled backup of each due site, not again within the day, and prunes what is past retention', async () => {
    const s = await createSite(stack);
    // Only this site's schedule is on.
    await stack.db('wordpress_sites').whereNot({ service_id: s.serviceId }).update({ backups_enabled: false });
    const deps = stack.api.deps;
    const scheduler = new WordpressBackupScheduler({ db: stack.db, temporal: deps.temporal, logger: deps.logger, dataDir, intervalMs: 60_000 });

    // Old ones: a scheduled backup past retention (7 days) with its archive, a manual one as old, a recent scheduled one.
    const oldPath = archivePathOf(dataDir, s.serviceId, 900_001);
    await mkdir(path.dirname(oldPath), { recursive: true });
    await writeFile(oldPath, 'old archive');
    const oldScheduled = await insertBackup(s, { kind: 'scheduled', daysAgo: 8, path: oldPath });
    const oldManual = await insertBackup(s, { kind: 'manual', daysAgo: 8 });
    const recentScheduled = await insertBackup(s, { kind: 'scheduled', daysAgo: 2 });

    await scheduler.pass();
    const made = await stack
      .db('wordpress_backups')
      .where({ service_id: s.serviceId, kind: 'scheduled' })
      .where('created_at', '>', stack.db.raw(`now() - interval '1 hour'`));
    expect(made).toHaveLength(1);
    const backupId = Number(made[0].id);
    const done = await waitFor(
      () => stack.db('wordpress_backups').where({ id: backupId }).first(),
      (b) => b.status !== 'running',
      30_000,
    );
    expect(done).toMatchObject({ status: 'completed', kind: 'scheduled', operation_id: null });
    expect(Number(done.size_bytes)).toBeGreaterThan(0);
    // Its run, named for operators; no operation was made for it.
    const described = await deps.temporal.handle(`wordpress-backup-${s.id}-bkp_${backupId}`).describe();
    expect(described.type).toBe('wordpressScheduledBackupWorkflow');
    expect(await described.memo).toMatchObject({ kind: 'scheduled', backup: `bkp_${backupId}`, resource: `wordpress ${s.id}` });
    expect(await stack.db('operations').where({ service_id: s.serviceId }).first()).toBeUndefined();

    const remaining = (await stack.db('wordpress_backups').where({ service_id: s.serviceId })).map((b: { id: string }) => Number(b.id));
    expect(remaining).not.toContain(oldScheduled);
    expect(remaining).toEqual(expect.arrayContaining([oldManual, recentScheduled, backupId]));
    expect(existsSync(oldPath)).toBe(false);

    // Listed with the manual ones; a second pass the same day starts none; nor does a disabled site.
    const listed = await api.get(`/v1/wordpress/${s.id}/backups`);
    expect(listed.body.data[0]).toMatchObject({ id: `bkp_${backupId}`, kind: 'scheduled', status: 'completed' });
    await scheduler.pass();
    expect(await stack.db('wordpress_backups').where({ service_id: s.serviceId, kind: 'scheduled' }).count('* as n').first()).toMatchObject({ n: 2 });
    // Scheduled backups do not count against the manual allowance: five manual ones still go.
    for (let i = 0; i < 4; i++) await insertBackup(s, {});
    expect((await backUp(s)).status).toBe('succeeded');
  });

  it('a running backup whose operation is gone is settled failed, and the site takes backups again', async () => {
    const s = await createSite(stack);
    await stack.db('wordpress_backups').insert({ service_id: s.serviceId, kind: 'manual', status: 'running', operation_id: 'op_gone' });
    expect((await backUp(s)).status).toBe('succeeded');
    const rows = await stack.db('wordpress_backups').where({ service_id: s.serviceId }).orderBy('id');
    expect(rows.map((r: { status: string }) => r.status)).toEqual(['failed', 'completed']);
  });
});
