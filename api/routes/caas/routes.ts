import { z } from 'zod';
import { formatId, newUlidId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { presentDeployment } from '../../../activities/caas/activities';
import { addDomain, CAAS_LIMITS, createApp, deleteApp, deleteDomain, envNames, putEnv, restartApp, type CaasDeps } from '../../../domain/caas/manage';
import { createDatabase, listDatabases } from '../../../domain/caas/databases';
import { runEnvOf } from '../../../domain/caas/runtime-env';
import { appRef, findApp, findVisibleCaas, visibleCaasQuery, type AppRow, type CaasTarget, type DeploymentRow } from '../../../domain/caas/store';
import { conflict } from '../../../domain/errors';
import type { Principal } from '../../../domain/principal';
import { findTarget, type ServiceRow } from '../../../domain/services';
import { liveRead } from '../../../providers/errors';
import type { AppDeps } from '../../deps';
import { keysetPage, listEnvelope, listFingerprint, pageOfItems, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { idParam, listOf, OperationSchema } from '../../schemas';
import { startOperation } from '../../start-operation';

/**
 * Container apps (SPEC "CaaS", DECISIONS "CaaS"). `{id}` is the caas service (`svc_<n>`), which
 * holds apps (`app_<n>`); a deploy is the `caas.deploy` operation (workflows/caas/). The apps run as
 * containers on the backend (podman, or the simulator) and are served by Host at the service's
 * `ingress_url`. Variable values and database passwords reach no answer. docs/caas.md.
 */
const TAG = 'Container apps';

const idParams = z.object({ id: idParam('svc_1') });
const appParams = z.object({ id: idParam('svc_1'), app_id: idParam('app_1') });
const domainParams = z.object({ id: idParam('svc_1'), app_id: idParam('app_1'), host: z.string().min(1).max(300).meta({ example: 'shop.example.com' }) });

const SourceSchema = z.object({ type: z.literal('archive'), url: z.string() }).meta({ id: 'CaasSource' });

export const CaasSchema = z
  .object({
    object: z.literal('caas'),
    id: z.string(),
    name: z.string(),
    ip: z.string().nullable().meta({ description: 'Where domains must point (A or AAAA)' }),
    ingress_url: z.string().nullable().meta({ description: 'Serves the apps by Host (the port is ignored); no app for a host: 404' }),
    provisioning_state: z.enum(['provisioning', 'ready', 'failed']).nullable(),
    machine: z.object({ cpu_cores: z.number(), memory_bytes: z.number().int(), apps_running: z.number().int() }).nullable(),
    limits: z.object({ apps: z.number().int(), databases: z.number().int() }),
    capabilities: z.record(z.string(), z.boolean()),
    created_at: z.string(),
  })
  .meta({ id: 'Caas' });

const AppSchema = z
  .object({
    object: z.literal('caas_app'),
    id: z.string(),
    service_id: z.string(),
    name: z.string(),
    source: SourceSchema.nullable().meta({ description: 'null in lists' }),
    status: z.enum(['idle', 'deploying', 'running', 'failed']),
    default_host: z.string().meta({ description: 'Served at `ingress_url` with this Host, no DNS needed' }),
    current_deployment_id: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'CaasApp' });

const DeploymentSchema = z
  .object({
    object: z.literal('caas_deployment'),
    id: z.string(),
    app_id: z.string(),
    status: z.enum(['pending', 'building', 'starting', 'active', 'superseded', 'failed']),
    source_sha256: z.string().nullable(),
    error_code: z.string().nullable(),
    created_at: z.string(),
    finished_at: z.string().nullable(),
  })
  .meta({ id: 'CaasDeployment' });

const EnvVarSchema = z.object({ object: z.literal('caas_env_var'), name: z.string() }).meta({ id: 'CaasEnvVar' });
const DomainSchema = z
  .object({ object: z.literal('caas_domain'), host: z.string(), app_id: z.string(), certificate_type: z.null(), created_at: z.string() })
  .meta({ id: 'CaasDomain' });
const DatabaseSchema = z
  .object({
    object: z.literal('caas_database'),
    name: z.string(),
    engine: z.enum(['postgresql', 'mysql']),
    env_var: z.string().meta({ description: 'The variable apps get its URL in (from their next deploy or restart); the password is never returned' }),
    created_at: z.string(),
  })
  .meta({ id: 'CaasDatabase' });
const LogLineSchema = z
  .object({ timestamp: z.string(), source: z.enum(['build', 'app', 'platform']), deployment_id: z.string().nullable(), message: z.string() })
  .meta({ id: 'CaasLogLine' });

const CreateAppBody = z.object({
  name: z.string().max(64).meta({ description: '^[a-z][a-z0-9-]{0,30}[a-z0-9]$, unique in the service' }),
  source: z.unknown().meta({ description: '`{type: "archive", url}`: a .tar.gz fetched by each deploy (https, public)' }),
});
const EnvBody = z.object({ vars: z.unknown().meta({ description: 'The whole set: `[{name, value}]`; absent variables are deleted' }) });
const DomainBody = z.object({ host: z.string().max(300).meta({ description: 'A DNS name that resolves to the service `ip`' }) });
const DatabaseBody = z.object({ engine: z.string().max(32).meta({ description: '`postgresql` or `mysql`' }), name: z.string().max(64) });
const LogsQuery = z.object({ lines: z.coerce.number().int().min(1).max(1000).default(100).meta({ description: 'Lines, 1 to 1000 (default 100)' }) });

const NOT_READY = { status: 409, description: 'The service is still being set up, or its status refuses the change (`conflict`)' };

function provisioningState(service: ServiceRow, ready: boolean): 'provisioning' | 'ready' | 'failed' {
  if (ready) return 'ready';
  return ['cancelled', 'fraud', 'terminated'].includes(service.status) ? 'failed' : 'provisioning';
}

function presentCaas(
  service: ServiceRow,
  space: { ip: string; ingress_url: string } | null,
  detail: { state: boolean; machine: { cpuCores: number; memoryBytes: number; appsRunning: number } | null } | null,
) {
  return {
    object: 'caas' as const,
    id: formatId('svc', service.id),
    name: service.label ?? service.name ?? formatId('svc', service.id),
    ip: space?.ip ?? null,
    ingress_url: space?.ingress_url ?? null,
    provisioning_state: detail?.state ? provisioningState(service, space !== null) : null,
    machine: detail?.machine
      ? { cpu_cores: detail.machine.cpuCores, memory_bytes: detail.machine.memoryBytes, apps_running: detail.machine.appsRunning }
      : null,
    limits: { ...CAAS_LIMITS },
    capabilities: (service.capabilities ?? {}) as Record<string, boolean>,
    created_at: iso(service.created_at)!,
  };
}

const presentApp = (app: AppRow, withSource = true) => ({
  object: 'caas_app' as const,
  id: appRef(app.id),
  service_id: formatId('svc', app.service_id),
  name: app.name,
  source: withSource ? app.source : null,
  status: app.status,
  default_host: app.default_host,
  current_deployment_id: app.current_deployment_id,
  created_at: iso(app.created_at)!,
  updated_at: iso(app.updated_at)!,
});

function caasDeps(deps: AppDeps): CaasDeps {
  return {
    db: deps.db,
    keyring: deps.keyring,
    caas: deps.providers.caas,
    policy: { allowInsecure: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS },
    appsDomain: deps.config.CAAS_APPS_DOMAIN,
    resolver: deps.config.DNS_RESOLVER,
  };
}

/** A visible caas service whose capability holds, with its space (409 while it is being built); `action` refuses a service whose status takes none. */
async function spaceTarget(deps: AppDeps, principal: Principal, id: string, capability: string, action?: string) {
  const target: CaasTarget = await findTarget(() => findVisibleCaas(deps.db, principal, id), { capability, action });
  if (!target.space) throw conflict('This container service is still being set up; try again in a few seconds.');
  return { service: target.service, space: target.space };
}

export const caasRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/caas',
    operationId: 'listCaas',
    summary: 'List container services',
    description: "From the control plane's database: `provisioning_state` and `machine` are `null`. Read one service for live values.",
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of container services, newest first', schema: listOf(CaasSchema, 'CaasList') }],
    async handler({ query, principal, deps }) {
      const page = await keysetPage(visibleCaasQuery(deps.db, principal), {
        cursors: deps.cursors,
        list: listFingerprint('caas', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((row: ServiceRow & { caas_ip: string | null; caas_ingress_url: string | null }) =>
            presentCaas(row, row.caas_ip ? { ip: row.caas_ip, ingress_url: row.caas_ingress_url! } : null, null),
          ),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}',
    operationId: 'getCaas',
    summary: 'Get a container service with its live state',
    description:
      '`machine` is read from the backend; when it does not answer in time, `provisioning_state` and `machine` are `null` and the call still succeeds.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The container service', schema: CaasSchema }],
    async handler({ params, principal, deps }) {
      const { service, space } = await findVisibleCaas(deps.db, principal, params.id);
      const machine = space ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.caas.machine(service.id)) : null;
      const answered = space === null || machine !== null;
      return { body: presentCaas(service, space, answered ? { state: true, machine } : null) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/caas/{id}/apps',
    operationId: 'createCaasApp',
    summary: 'Create an app',
    description:
      'Creates the app `idle`: nothing is fetched or deployed until `POST .../deploy`. A name taken in the service is `409 already_exists`; past `limits.apps`, `429 quota_exceeded`.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['R', 'I'],
    params: idParams,
    body: CreateAppBody,
    exampleBody: { name: 'shop', source: { type: 'archive', url: 'https://example.com/shop.tar.gz' } },
    responses: [{ status: 201, description: 'The app', schema: AppSchema }, NOT_READY],
    async handler({ params, body, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'apps', 'creating an app');
      return { status: 201, body: presentApp(await createApp(caasDeps(deps), service.id, { name: body.name, source: body.source })) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps',
    operationId: 'listCaasApps',
    summary: 'List the apps',
    description: 'Newest first; `source` is `null` here (read one app for it).',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: idParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of apps', schema: listOf(AppSchema, 'CaasAppList') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'apps' });
      const qb = deps.db('caas_apps').where({ service_id: service.id }).select('*');
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint(`caas.apps:${service.id}`, {}),
        column: 'caas_apps.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r: AppRow) => presentApp({ ...r, id: Number(r.id), service_id: Number(r.service_id) }, false)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps/{app_id}',
    operationId: 'getCaasApp',
    summary: 'Get an app',
    description: 'Only the declared fields: never the backend’s object or a variable’s value.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: appParams,
    responses: [{ status: 200, description: 'The app', schema: AppSchema }],
    async handler({ params, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'apps' });
      return { body: presentApp(await findApp(deps.db, service.id, params.app_id)) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/caas/{id}/apps/{app_id}',
    operationId: 'deleteCaasApp',
    summary: 'Delete an app',
    description: 'Stops its containers and removes its images, route, variables, domains and deployment history. The service’s databases and their data stay.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['D', 'I'],
    params: appParams,
    responses: [{ status: 204, description: 'Deleted' }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'apps', 'deleting an app');
      await deleteApp(caasDeps(deps), service.id, params.app_id);
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/caas/{id}/apps/{app_id}/deploy',
    operationId: 'deployCaasApp',
    summary: 'Deploy an app',
    description:
      '`202` with the `caas.deploy` operation: it fetches the source, builds an image, starts it, waits until it listens on `$PORT` (`CAAS_START_TIMEOUT`), then switches the app’s hosts to it with no downtime. It fails with `source_unavailable`, `build_failed` or `start_failed` and leaves the previous deployment serving; the details are in the app’s logs. `result.deployment` is the deployment. One deployment runs at a time per app: `409 conflict`.',
    tag: TAG,
    scope: 'caas:deploy',
    marks: ['R', 'A', 'I'],
    params: appParams,
    responses: [{ status: 202, description: 'The `caas.deploy` operation', schema: OperationSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'deploy', 'deploying an app');
      const app = await findApp(deps.db, service.id, params.app_id);
      if (!app.source) throw conflict('The app has no source to deploy.');
      const deploymentId = newUlidId('dep');
      return startOperation(deps, principal, {
        type: 'caas.deploy',
        input: { serviceId: service.id, appId: app.id, deploymentId },
        resource: { object: 'caas_app', id: appRef(app.id) },
        serviceId: service.id,
        inTransaction: async (trx, operationId) => {
          try {
            await trx('caas_deployments').insert({ id: deploymentId, app_id: app.id, service_id: service.id, operation_id: operationId, status: 'pending' });
          } catch (err) {
            if ((err as { code?: string }).code === '23505') throw conflict('A deployment of this app is in progress; wait for it to end.');
            throw err;
          }
          await trx('caas_apps').where({ id: app.id }).whereNull('current_deployment_id').update({ status: 'deploying', updated_at: trx.fn.now() });
        },
      });
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/caas/{id}/apps/{app_id}/restart',
    operationId: 'restartCaasApp',
    summary: 'Restart an app',
    description:
      'A new container of the serving deployment’s image with the current variables (and databases), routed once it listens: `200` with the app then. Pulls no new code. Nothing deployed: `409 conflict`; the backend down: `503 backend_unavailable` and the app keeps serving.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['R', 'I'],
    params: appParams,
    responses: [{ status: 200, description: 'The app, listening again', schema: AppSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'apps', 'restarting an app');
      const restarted = await restartApp(
        {
          ...caasDeps(deps),
          runEnv: (app) => runEnvOf({ db: deps.db, keyring: deps.keyring, providers: deps.providers }, app),
          startTimeoutMs: deps.config.CAAS_START_TIMEOUT,
        },
        service.id,
        params.app_id,
      );
      return { body: presentApp(restarted) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps/{app_id}/deployments',
    operationId: 'listCaasDeployments',
    summary: 'List an app’s deployments',
    description: 'Newest first. Each keeps its image.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: appParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of deployments', schema: listOf(DeploymentSchema, 'CaasDeploymentList') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'deploy' });
      const app = await findApp(deps.db, service.id, params.app_id);
      const qb = deps.db('caas_deployments').where({ app_id: app.id }).select('*');
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint(`caas.deployments:${app.id}`, {}),
        column: 'caas_deployments.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r: DeploymentRow) => presentDeployment({ ...r, app_id: Number(r.app_id) })),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps/{app_id}/logs',
    operationId: 'getCaasAppLogs',
    summary: 'Read an app’s logs',
    description:
      'A snapshot, oldest first: the last `lines` of its build output (`build`), its running container’s output (`app`) and the platform’s messages about it (`platform`). No cursor: call again to follow. The container’s lines are missing when the backend does not answer.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: appParams,
    query: LogsQuery,
    responses: [{ status: 200, description: 'Log lines', schema: listOf(LogLineSchema, 'CaasLogLines') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'logs' });
      const app = await findApp(deps.db, service.id, params.app_id);
      const stored: Array<{ at: Date; source: 'build' | 'platform'; deployment_id: string | null; message: string }> = await deps
        .db('caas_logs')
        .where({ app_id: app.id })
        .orderBy('id', 'desc')
        .limit(query.lines)
        .select('at', 'source', 'deployment_id', 'message');
      const running = app.current_deployment_id;
      const live = running
        ? ((await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.caas.logs(service.id, appRef(app.id), running, query.lines))) ?? [])
        : [];
      const lines = [
        ...stored.map((r) => ({ timestamp: iso(r.at)!, source: r.source, deployment_id: r.deployment_id, message: r.message })),
        ...live.map((l) => ({ timestamp: l.timestamp, source: 'app' as const, deployment_id: running, message: l.message })),
      ]
        .sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0))
        .slice(-query.lines);
      return { body: listEnvelope(lines, { hasMore: false, nextCursor: null }) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps/{app_id}/env',
    operationId: 'listCaasAppEnv',
    summary: 'List an app’s variable names',
    description: 'Names only, in the order they were given: values are never returned.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: appParams,
    responses: [{ status: 200, description: 'The variables', schema: listOf(EnvVarSchema, 'CaasEnvVarList') }],
    async handler({ params, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'apps' });
      const app = await findApp(deps.db, service.id, params.app_id);
      return {
        body: listEnvelope(
          (await envNames(deps.db, app.id)).map((name) => ({ object: 'caas_env_var' as const, name })),
          { hasMore: false, nextCursor: null },
        ),
      };
    },
  }),
  defineRoute({
    method: 'put',
    path: '/v1/caas/{id}/apps/{app_id}/env',
    operationId: 'putCaasAppEnv',
    summary: 'Replace an app’s variables',
    description:
      'The whole set: variables not given are deleted. Names `^[A-Za-z_][A-Za-z0-9_]{0,127}$`, unique, not `PORT`, `DATABASE_URL*` or `CAAS_*`; string values (sealed at rest, never returned). They reach the app at its next deploy or restart. `200` with the names.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['D', 'I'],
    params: appParams,
    body: EnvBody,
    exampleBody: { vars: [{ name: 'GREETING', value: 'hello' }] },
    responses: [{ status: 200, description: 'The variable names', schema: listOf(EnvVarSchema, 'CaasEnvVarNames') }, NOT_READY],
    async handler({ params, body, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'apps', 'changing variables');
      const names = await putEnv(caasDeps(deps), service.id, params.app_id, body.vars);
      return {
        body: listEnvelope(
          names.map((name) => ({ object: 'caas_env_var' as const, name })),
          { hasMore: false, nextCursor: null },
        ),
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/caas/{id}/apps/{app_id}/domains',
    operationId: 'addCaasDomain',
    summary: 'Route a domain to an app',
    description:
      '`host` must resolve to the service’s `ip` first (`400 domain_not_pointed`, nothing stored). `201`; the same app again `200`; routed to another app `409 conflict`. Not atomic: the domain may exist when an error is returned, and retrying is safe. `certificate_type` is `null`: a certificate is issued later, with no id or state to query.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['R', 'I'],
    params: appParams,
    body: DomainBody,
    exampleBody: { host: 'shop.example.com' },
    responses: [
      { status: 201, description: 'The domain', schema: DomainSchema },
      { status: 200, description: 'Routed to this app already', schema: DomainSchema },
      NOT_READY,
    ],
    async handler({ params, body, principal, deps }) {
      const { space } = await spaceTarget(deps, principal, params.id, 'domains', 'adding a domain');
      const added = await addDomain(caasDeps(deps), space, params.app_id, body.host);
      return {
        status: added.created ? 201 : 200,
        body: { object: 'caas_domain' as const, host: added.host, app_id: appRef(added.app_id), certificate_type: null, created_at: iso(added.created_at)! },
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/caas/{id}/apps/{app_id}/domains/{host}',
    operationId: 'deleteCaasDomain',
    summary: 'Remove a domain from an app',
    description: 'Removing a host that is not routed to the app is not an error.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['D', 'I'],
    params: domainParams,
    responses: [{ status: 204, description: 'Removed' }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'domains', 'removing a domain');
      await deleteDomain(caasDeps(deps), service.id, params.app_id, params.host);
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/apps/{app_id}/domains',
    operationId: 'listCaasDomains',
    summary: 'List an app’s domains',
    description: 'By host.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: appParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of domains', schema: listOf(DomainSchema, 'CaasDomainList') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'domains' });
      const app = await findApp(deps.db, service.id, params.app_id);
      const rows: Array<{ host: string; created_at: Date }> = await deps.db('caas_domains').where({ app_id: app.id });
      const page = pageOfItems(deps.cursors, listFingerprint(`caas.domains:${app.id}`, {}), rows, (r) => r.host, query);
      return {
        body: listEnvelope(
          page.data.map((r) => ({
            object: 'caas_domain' as const,
            host: r.host,
            app_id: appRef(app.id),
            certificate_type: null,
            created_at: iso(r.created_at)!,
          })),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/caas/{id}/databases',
    operationId: 'createCaasDatabase',
    summary: 'Create a database',
    description:
      'A database and its own user on the service’s PostgreSQL or MySQL (MariaDB) server: `201`. Its password is generated and never returned; apps get `env_var` (`DATABASE_URL_<NAME>`) with its URL from their next deploy or restart, and `DATABASE_URL` is the oldest database’s. A name taken `409 already_exists`; past `limits.databases`, `429 quota_exceeded`. There is no delete in v1.',
    tag: TAG,
    scope: 'caas:write',
    marks: ['R', 'I'],
    params: idParams,
    body: DatabaseBody,
    exampleBody: { engine: 'postgresql', name: 'shop' },
    responses: [{ status: 201, description: 'The database', schema: DatabaseSchema }, NOT_READY],
    async handler({ params, body, principal, deps }) {
      const { service } = await spaceTarget(deps, principal, params.id, 'databases', 'creating a database');
      return { status: 201, body: await createDatabase({ db: deps.db, keyring: deps.keyring, providers: deps.providers }, service.id, body) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/caas/{id}/databases',
    operationId: 'listCaasDatabases',
    summary: 'List the databases',
    description: 'The service’s databases, shared by its apps; credentials are never returned.',
    tag: TAG,
    scope: 'caas:read',
    marks: [],
    params: idParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of databases', schema: listOf(DatabaseSchema, 'CaasDatabaseList') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleCaas(deps.db, principal, params.id), { capability: 'databases' });
      const all = await listDatabases(deps.db, service.id);
      const page = pageOfItems(deps.cursors, listFingerprint(`caas.databases:${service.id}`, {}), all, (d) => d.name, query);
      return { body: listEnvelope(page.data, page) };
    },
  }),
];
