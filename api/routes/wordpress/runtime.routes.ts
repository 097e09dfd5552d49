import { z } from 'zod';
import { compareVersions, notFoundIfGone } from '../../../domain/wordpress/plugins';
import { checkPhpVersion, flushCaches, PHP_SETTING_KEYS, phpSettingsChange, recordPhpVersion } from '../../../domain/wordpress/runtime';
import type { WordpressProvider, WpCronEvent, WpPhp } from '../../../providers/wordpress.provider';
import { listFingerprint } from '../../pagination';
import { defineBackendList, defineSyncWrite } from '../../route-presets';
import { defineRoute } from '../../route';
import { idParam } from '../../schemas';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/**
 * What a site runs on (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): its caches, WordPress
 * core updates, WordPress's cron, and PHP (version, settings, restart). Each is a synchronous write
 * on the site's node (503 when it does not answer). Logic: domain/wordpress/runtime.ts.
 */
const HOOK_RE = /^[A-Za-z0-9_.:-]{1,191}$/;

const hookParams = z.object({
  id: idParam('svc_1'),
  hook: z
    .string()
    .regex(HOOK_RE, 'must be a cron hook name: letters, digits, "_", ".", ":" and "-", 1 to 191 characters')
    .meta({ example: 'wp_version_check', description: 'The hook of the scheduled event' }),
});

const CacheFlushSchema = z
  .object({
    object: z.literal('wordpress_cache_flush'),
    flushed: z.array(z.string()).meta({ description: 'What was flushed: `object`, `page`, and `cdn` when the site’s CDN is on' }),
  })
  .meta({ id: 'WordpressCacheFlush' });

const CoreUpdatesSchema = z
  .object({
    object: z.literal('wordpress_core_updates'),
    current_version: z.string(),
    latest_version: z.string().meta({ description: 'The newest version the platform offers' }),
    update_available: z.boolean(),
  })
  .meta({ id: 'WordpressCoreUpdates' });

const CronEventSchema = z
  .object({
    object: z.literal('wordpress_cron_event'),
    hook: z.string(),
    schedule: z.string().nullable().meta({ description: 'The recurrence (`hourly`, `twicedaily`, `daily`, `weekly`); null for a single event' }),
    next_run_at: z.string(),
  })
  .meta({ id: 'WordpressCronEvent' });

const CronRunSchema = z.object({ object: z.literal('wordpress_cron_run'), hook: z.string(), executed_at: z.string() }).meta({ id: 'WordpressCronRun' });

const PhpSettingsSchema = z
  .object({
    memory_limit: z.string(),
    upload_max_filesize: z.string(),
    post_max_size: z.string(),
    max_execution_time: z.number().int(),
    max_input_vars: z.number().int(),
  })
  .meta({ id: 'WordpressPhpSettings' });

const PhpSchema = z
  .object({
    object: z.literal('wordpress_php'),
    version: z.string().meta({ description: 'The PHP version that runs the site (`8.2`)' }),
    available_versions: z.array(z.string()),
    settings: PhpSettingsSchema,
  })
  .meta({ id: 'WordpressPhp' });

/**
 * The PATCH body: settings keys at the top level. Checked by the handler (phpSettingsChange) so
 * that an unknown key or a bad value is `400 validation_failed` with the key as `param`.
 */
const PhpPatchBody = z
  .looseObject({
    memory_limit: z.unknown().optional().meta({ description: 'A size such as `256M` or `1G`, 64M to 1G' }),
    upload_max_filesize: z.unknown().optional().meta({ description: 'A size, 1M to 512M; at most `post_max_size`' }),
    post_max_size: z.unknown().optional().meta({ description: 'A size, 1M to 512M; at least `upload_max_filesize`' }),
    max_execution_time: z.unknown().optional().meta({ description: 'Seconds, 1 to 300' }),
    max_input_vars: z.unknown().optional().meta({ description: '100 to 100000' }),
  })
  .meta({ description: `Only the keys given change (${PHP_SETTING_KEYS.join(', ')}); any other key is refused` });

const PhpVersionBody = z.object({ version: z.string().min(1).max(20).meta({ description: 'One of `available_versions`, such as `8.2`' }) });

async function presentPhp(wp: WordpressProvider, php: WpPhp) {
  return { object: 'wordpress_php' as const, version: php.version, available_versions: await wp.phpVersions(), settings: { ...php.settings } };
}

async function coreUpdates(wp: WordpressProvider, serviceId: number) {
  const [current, latest] = await Promise.all([wp.coreVersion(serviceId), wp.latestCoreVersion()]);
  return {
    object: 'wordpress_core_updates' as const,
    current_version: current,
    latest_version: latest,
    update_available: compareVersions(latest, current) > 0,
  };
}

/** Cron events can repeat a hook (and even a time): a key unique per event, stable while the schedule does not change. */
function keyedCron(events: WpCronEvent[]): Array<WpCronEvent & { key: string }> {
  const seen = new Map<string, number>();
  return events.map((e) => {
    const base = `${e.nextRunAt}\u0000${e.hook}\u0000${e.schedule ?? ''}`;
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    return { ...e, key: `${base}\u0000${String(n).padStart(6, '0')}` };
  });
}

const HOOK_NOT_FOUND = { status: 404, description: 'No event of that hook is scheduled (`not_found`)' };

export const runtimeRoutes = [
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/cache/flush',
    operationId: 'flushWordpressCache',
    summary: 'Flush the site’s caches',
    description: 'The object cache and the page cache, and the edge’s cache of the site’s media when its CDN is on.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['I'],
    params: siteParams,
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'What was flushed', schema: CacheFlushSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'cache', 'flushing caches'),
    async write({ site }, { deps }) {
      return { object: 'wordpress_cache_flush' as const, flushed: await flushCaches(deps.providers.wordpress, site) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/core/updates',
    operationId: 'getWordpressCoreUpdates',
    summary: 'Get the WordPress version and the latest offered',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The core versions', schema: CoreUpdatesSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'core_updates');
      return { body: await coreUpdates(deps.providers.wordpress, service.id) };
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/core/updates',
    operationId: 'updateWordpressCore',
    summary: 'Update WordPress to the latest offered version',
    description:
      'Switches the site to the latest WordPress the platform offers and runs the database upgrade, then answers the versions. Already the latest: `200`, nothing changed.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'The core versions after the update', schema: CoreUpdatesSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'core_updates', 'updating WordPress'),
    async write({ service }, { deps }) {
      const wp = deps.providers.wordpress;
      const before = await coreUpdates(wp, service.id);
      if (!before.update_available) return before;
      await wp.updateCore(service.id);
      return coreUpdates(wp, service.id);
    },
  }),
  defineBackendList({
    path: '/v1/wordpress/{id}/cron',
    operationId: 'listWordpressCron',
    summary: 'List the scheduled cron events',
    description: 'WordPress’s own schedule, read from the site, the next to run first.',
    tag: TAG,
    scope: 'wordpress:read',
    params: siteParams,
    item: CronEventSchema,
    listId: 'WordpressCronEventList',
    listed: 'The scheduled events',
    otherResponses: [NOT_READY],
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'cron'),
    items: async ({ service }, deps) => keyedCron(await deps.providers.wordpress.listCron(service.id)),
    list: ({ service }) => listFingerprint(`wordpress.cron:${service.id}`, {}),
    sortKey: (e) => e.key,
    present: (e) => ({ object: 'wordpress_cron_event' as const, hook: e.hook, schedule: e.schedule, next_run_at: e.nextRunAt }),
  }),
  defineSyncWrite({
    method: 'delete',
    path: '/v1/wordpress/{id}/cron/{hook}',
    operationId: 'deleteWordpressCronEvent',
    summary: 'Unschedule a cron hook',
    description: 'Removes every scheduled occurrence of the hook.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['D', 'I'],
    params: hookParams,
    otherResponses: [HOOK_NOT_FOUND, NOT_READY],
    answer: { status: 204, description: 'Unscheduled' },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'cron', 'removing a cron event'),
    async write({ service }, { params, deps }) {
      await deps.providers.wordpress.deleteCron(service.id, params.hook).catch((err) => notFoundIfGone(err, 'cron event'));
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/cron/{hook}/run',
    operationId: 'runWordpressCronEvent',
    summary: 'Run a cron hook now',
    description: 'Runs every scheduled occurrence of the hook now; a recurring event is scheduled again, a single one is done.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: hookParams,
    otherResponses: [HOOK_NOT_FOUND, NOT_READY],
    answer: { status: 200, description: 'When it ran', schema: CronRunSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'cron', 'running a cron event'),
    async write({ service }, { params, deps }) {
      const { executedAt } = await deps.providers.wordpress.runCron(service.id, params.hook).catch((err) => notFoundIfGone(err, 'cron event'));
      return { object: 'wordpress_cron_run' as const, hook: params.hook, executed_at: executedAt };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/php',
    operationId: 'getWordpressPhp',
    summary: 'Get the PHP version and settings',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'PHP as the site runs it', schema: PhpSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'php');
      return { body: await presentPhp(deps.providers.wordpress, await deps.providers.wordpress.php(service.id)) };
    },
  }),
  defineSyncWrite({
    method: 'patch',
    path: '/v1/wordpress/{id}/php',
    operationId: 'updateWordpressPhp',
    summary: 'Change PHP settings',
    description:
      'Only the keys given change, with a graceful reload. Sizes in PHP’s shorthand (`128M`, `1G`): `memory_limit` 64M to 1G, `upload_max_filesize` and `post_max_size` 1M to 512M with `post_max_size` at least `upload_max_filesize`; `max_execution_time` 1 to 300 seconds; `max_input_vars` 100 to 100000. A bad key or value: `400 validation_failed` with the key as `param`.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    body: PhpPatchBody,
    exampleBody: { memory_limit: '256M' },
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'PHP with the new settings', schema: PhpSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'php', 'changing PHP settings'),
    async write({ service }, { body, deps }) {
      const wp = deps.providers.wordpress;
      const php = await wp.php(service.id);
      const change = phpSettingsChange(body as Record<string, unknown>, php.settings);
      return presentPhp(wp, Object.keys(change).length > 0 ? await wp.setPhpSettings(service.id, change) : php);
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/php/version',
    operationId: 'setWordpressPhpVersion',
    summary: 'Change the PHP version',
    description: 'Runs the site on another PHP version of `available_versions` (a few seconds of errors while PHP restarts); custom settings carry over.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    body: PhpVersionBody,
    exampleBody: { version: '8.2' },
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'PHP as it now runs', schema: PhpSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'php', 'changing the PHP version'),
    async write({ service }, { body, deps }) {
      const wp = deps.providers.wordpress;
      await checkPhpVersion(wp, body.version);
      const php = await wp.setPhpVersion(service.id, body.version);
      await recordPhpVersion(deps.db, service.id, php.version);
      return presentPhp(wp, php);
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/php/restart',
    operationId: 'restartWordpressPhp',
    summary: 'Restart PHP gracefully',
    description: 'A graceful restart of the site’s PHP: requests in flight finish, none is dropped. Answers PHP as it runs after the restart.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['I'],
    params: siteParams,
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'PHP after the restart', schema: PhpSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'php', 'restarting PHP'),
    async write({ service }, { deps }) {
      const wp = deps.providers.wordpress;
      await wp.restartPhp(service.id);
      return presentPhp(wp, await wp.php(service.id));
    },
  }),
];
