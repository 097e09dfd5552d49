import { z } from 'zod';
import {
  installPlugin,
  installSource,
  PLUGIN_SLUG_RE,
  PLUGIN_SLUG_RULE,
  PLUGIN_ZIP_MAX_BYTES,
  notFoundIfGone,
  pluginView,
  updateAllPlugins,
  updatePlugin,
  withDirectory,
  type PluginView,
} from '../../../domain/wordpress/plugins';
import type { WpDirectoryPlugin } from '../../../providers/wordpress.provider';
import { listEnvelope, listFingerprint, pageOfItems, paginationQuery } from '../../pagination';
import { defineBackendList, defineSyncWrite } from '../../route-presets';
import { defineRoute } from '../../route';
import { idParam, listOf } from '../../schemas';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/**
 * A site's plugins (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): the installed ones with
 * what the plugin directory offers for each, the directory's search, installs from the directory or
 * from a zip URL, (de)activation, removal and updates from the directory. Every call goes to the
 * site's node (503 when it does not answer). Logic: domain/wordpress/plugins.ts.
 */
const slugParams = z.object({
  id: idParam('svc_1'),
  slug: z.string().regex(PLUGIN_SLUG_RE, PLUGIN_SLUG_RULE).meta({ example: 'akismet', description: 'The plugin’s slug (its folder)' }),
});

const PluginSchema = z
  .object({
    object: z.literal('wordpress_plugin'),
    slug: z.string(),
    name: z.string(),
    version: z.string().meta({ description: 'The installed version' }),
    active: z.boolean(),
    update_available: z.boolean().meta({ description: 'The plugin directory has a greater version; false for a plugin the directory does not list' }),
    latest_version: z.string().nullable().meta({ description: 'The directory’s latest version; null for a plugin it does not list' }),
  })
  .meta({ id: 'WordpressPlugin' });

const DirectoryPluginSchema = z
  .object({
    slug: z.string(),
    name: z.string(),
    latest_version: z.string(),
    versions: z.array(z.string()).meta({ description: 'Every version that can be installed, oldest first' }),
  })
  .meta({ id: 'WordpressDirectoryPlugin' });

const PluginUpdatesSchema = z
  .object({
    object: z.literal('wordpress_plugin_updates'),
    updated: z
      .array(z.object({ slug: z.string(), from_version: z.string(), to_version: z.string() }))
      .meta({ description: 'Empty when every plugin was up to date' }),
  })
  .meta({ id: 'WordpressPluginUpdates' });

const InstallBody = z.object({
  slug: z.string().max(100).optional().meta({ description: 'A plugin of the plugin directory (see the search); or give `url`' }),
  version: z
    .string()
    .max(50)
    .optional()
    .meta({ description: 'With `slug`: the version to install (default the latest); an installed plugin is reinstalled at it' }),
  url: z
    .string()
    .max(2048)
    .optional()
    .meta({
      description: `An https URL of a plugin zip (at most ${PLUGIN_ZIP_MAX_BYTES >> 20} MiB, public address, redirects not followed); the zip's only top folder is the plugin's slug`,
    }),
  sha256: z.string().max(64).optional().meta({ description: 'With `url`: the zip’s SHA-256 (hex); a mismatch is refused before anything is installed' }),
  activate: z.boolean().default(true).meta({ description: 'Activate the plugin once installed (default true)' }),
});

const SearchQuery = z.object({
  q: z.string().max(200).default('').meta({ description: 'Words of the slug, name or description; empty lists the whole directory' }),
  ...paginationQuery(),
});

const NOT_IN_DIRECTORY = {
  status: 409,
  description: 'The plugin is not in the plugin directory (nothing to update from), or the site refuses the change (`conflict`)',
};

const presentPlugin = (p: PluginView) => ({
  object: 'wordpress_plugin' as const,
  slug: p.slug,
  name: p.name,
  version: p.version,
  active: p.active,
  update_available: p.updateAvailable,
  latest_version: p.latestVersion,
});

const presentListed = (p: WpDirectoryPlugin) => ({ slug: p.slug, name: p.name, latest_version: p.latestVersion, versions: [...p.versions] });

/** (De)activation: the same route twice. */
function activation(verb: 'activate' | 'deactivate') {
  const active = verb === 'activate';
  return defineSyncWrite({
    method: 'post',
    path: `/v1/wordpress/{id}/plugins/{slug}/${verb}`,
    operationId: `${verb}WordpressPlugin`,
    summary: `${active ? 'Activate' : 'Deactivate'} a plugin`,
    description: active
      ? 'Activates an installed plugin through WordPress (its activation hook runs). Activating an active plugin changes nothing.'
      : 'Deactivates an installed plugin through WordPress; its files and settings stay. Deactivating an inactive plugin changes nothing.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: slugParams,
    otherResponses: [{ status: 404, description: 'The plugin is not installed (`not_found`)' }, NOT_READY],
    answer: { status: 200, description: 'The plugin', schema: PluginSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins', active ? 'activating a plugin' : 'deactivating a plugin'),
    async write({ service }, { params, deps }) {
      const wp = deps.providers.wordpress;
      const plugin = await (active ? wp.activatePlugin(service.id, params.slug) : wp.deactivatePlugin(service.id, params.slug)).catch((err) =>
        notFoundIfGone(err),
      );
      return presentPlugin(pluginView(plugin, await wp.directoryPlugin(params.slug)));
    },
  });
}

export const pluginRoutes = [
  defineBackendList({
    path: '/v1/wordpress/{id}/plugins',
    operationId: 'listWordpressPlugins',
    summary: 'List the installed plugins',
    description: 'Read from the site, by slug; `update_available` and `latest_version` come from the plugin directory.',
    tag: TAG,
    scope: 'wordpress:read',
    params: siteParams,
    item: PluginSchema,
    listId: 'WordpressPluginList',
    listed: 'The installed plugins',
    otherResponses: [NOT_READY],
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins'),
    items: async ({ service }, deps) => withDirectory(deps.providers.wordpress, await deps.providers.wordpress.listPlugins(service.id)),
    list: ({ service }) => listFingerprint(`wordpress.plugins:${service.id}`, {}),
    sortKey: (p) => p.slug,
    present: presentPlugin,
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/plugins/search',
    operationId: 'searchWordpressPlugins',
    summary: 'Search the plugin directory',
    description: 'Plugins of the plugin directory whose slug, name or description holds `q`, by slug, with every version that can be installed.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    query: SearchQuery,
    responses: [{ status: 200, description: 'The matching plugins', schema: listOf(DirectoryPluginSchema, 'WordpressDirectoryPluginList') }, NOT_READY],
    async handler({ params, query, principal, deps }) {
      await siteTarget(deps, principal, params.id, 'plugins');
      const found = await deps.providers.wordpress.searchDirectory(query.q);
      const page = pageOfItems(deps.cursors, listFingerprint('wordpress.plugin-search', { q: query.q }), found, (p) => p.slug, query);
      return { body: listEnvelope(page.data.map(presentListed), page) };
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/plugins',
    operationId: 'installWordpressPlugin',
    summary: 'Install a plugin',
    description:
      'From the plugin directory (`slug`, optionally `version`; an installed plugin is reinstalled at that version) or from a zip (`url`, optionally `sha256`): the zip is downloaded by the platform (https and a public address, no redirect, at most 20 MiB) and must hold exactly one top folder, the plugin’s slug. `activate` (default true) activates it. Unknown slug or version, a SHA-256 mismatch, a refused URL or zip: `400 validation_failed` with `param` `slug`, `version`, `sha256` or `url`.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    body: InstallBody,
    exampleBody: { slug: 'akismet' },
    otherResponses: [NOT_READY],
    answer: { status: 201, description: 'The installed plugin', schema: PluginSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins', 'installing a plugin'),
    async write({ service }, { body, deps }) {
      const source = installSource(body);
      const plugin = await installPlugin(
        { wp: deps.providers.wordpress, policy: { allowInsecure: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS } },
        service.id,
        source,
        body.activate,
      );
      return presentPlugin(plugin);
    },
  }),
  activation('activate'),
  activation('deactivate'),
  defineSyncWrite({
    method: 'delete',
    path: '/v1/wordpress/{id}/plugins/{slug}',
    operationId: 'deleteWordpressPlugin',
    summary: 'Remove a plugin',
    description: 'Deactivates the plugin and removes its files; its settings stay in the database.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['D', 'I'],
    params: slugParams,
    otherResponses: [{ status: 404, description: 'The plugin is not installed (`not_found`)' }, NOT_READY],
    answer: { status: 204, description: 'Removed' },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins', 'removing a plugin'),
    async write({ service }, { params, deps }) {
      await deps.providers.wordpress.deletePlugin(service.id, params.slug).catch((err) => notFoundIfGone(err));
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/plugins/{slug}/update',
    operationId: 'updateWordpressPlugin',
    summary: 'Update a plugin to the directory’s latest version',
    description:
      'Installs the plugin directory’s latest version over the installed one, keeping whether it is active. Already the latest (or newer): `200` with the plugin unchanged. A plugin the directory does not list: `409 conflict`.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: slugParams,
    otherResponses: [{ status: 404, description: 'The plugin is not installed (`not_found`)' }, NOT_IN_DIRECTORY],
    answer: { status: 200, description: 'The plugin, updated or already up to date', schema: PluginSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins', 'updating a plugin'),
    async write({ service }, { params, deps }) {
      const { plugin } = await updatePlugin(deps.providers.wordpress, service.id, params.slug);
      return presentPlugin(plugin);
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/wordpress/{id}/plugins/update-all',
    operationId: 'updateAllWordpressPlugins',
    summary: 'Update every plugin the directory has a newer version of',
    description:
      'Each installed plugin the plugin directory has a greater version of is updated to it, keeping whether it is active; plugins the directory does not list are left as they are. Answers what changed.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    otherResponses: [NOT_READY],
    answer: { status: 200, description: 'The updates made', schema: PluginUpdatesSchema },
    target: ({ params, principal, deps }) => siteTarget(deps, principal, params.id, 'plugins', 'updating plugins'),
    async write({ service }, { deps }) {
      const updated = await updateAllPlugins(deps.providers.wordpress, service.id);
      return { object: 'wordpress_plugin_updates' as const, updated: updated.map((u) => ({ slug: u.slug, from_version: u.from, to_version: u.to })) };
    },
  }),
];
