import { z } from 'zod';
import { formatId } from '../../../common/ids';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import { adminPassword, changeAdminPassword, findVisibleDbaas, requireInstance, visibleDbaasQuery, type DbaasTarget } from '../../../domain/dbaas/store';
import { checkDatabaseName, checkUserRef, checkUsername, parseUserId } from '../../../domain/dbaas/validation';
import type { DbEngine, DbUserRef } from '../../../providers/dbaas.provider';
import { BackendGoneError, liveRead } from '../../../providers/errors';
import type { AppDeps } from '../../deps';
import { notFound, validationFailed } from '../../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { defineAsyncAction, defineBackendList, defineSyncWrite } from '../../route-presets';
import { OperationSchema, listOf } from '../../schemas';
import { accepted, startOperation } from '../../start-operation';
import {
  backupSortKey,
  CreateDatabaseBody,
  CreateUserBody,
  databaseParams,
  DbaasBackupSchema,
  DbaasConnectionSchema,
  DbaasCredentialsSchema,
  DbaasDatabaseSchema,
  DbaasLogEntrySchema,
  DbaasSchema,
  DbaasStatsSchema,
  DbaasUserSchema,
  idParams,
  LogsQuery,
  PasswordBody,
  presentBackup,
  presentConnection,
  presentDatabase,
  presentDbaas,
  presentLogEntry,
  presentStats,
  presentUser,
  userParams,
} from './schemas';

/**
 * Managed database services (SPEC "Database services (DBaaS)"). `{id}` is the dbaas service
 * (`svc_<n>`); the instance behind it is in `dbaas_instances`. The list comes from the database
 * with live fields null; the single read asks the instance; everything else acts on the instance
 * through the DBaaS provider, so an instance that does not answer gives `503 backend_unavailable`.
 * Passwords in request bodies go to the engine only: never stored, returned or logged.
 */
const TAG = 'Database services';

const NO_INSTANCE = { status: 409, description: 'The service has no running instance, yet or any more (`conflict`)' };

const resourceOf = (target: DbaasTarget) => ({ object: 'dbaas' as const, id: formatId('svc', target.service.id) });

/** A visible dbaas service whose `capability` is true, with its instance (409 while it has none). */
async function instanceTarget(deps: AppDeps, principal: Principal, id: string, capability: string | null, action?: string) {
  const target = await findTarget(() => findVisibleDbaas(deps.db, principal, id), { capability, action });
  return { target, instance: requireInstance(target) };
}

/**
 * A user path segment: a name, or a MySQL `user@host` id. 400 otherwise, and 400 for the engine's
 * and the control plane's own accounts (`postgres`, `root`, `pg_*`...): a customer never acts on them.
 */
function userRef(raw: string, engine: DbEngine): DbUserRef {
  const ref = parseUserId(raw);
  if (!ref) throw validationFailed([{ param: 'username', message: 'must be a user name, or on MySQL a user@host id' }]);
  const check = checkUserRef(ref, engine);
  if (!check.ok) throw validationFailed([{ param: 'username', message: check.message }]);
  return ref;
}

/** The thing a path names is not on the instance: 404 for it, not the generic 409 of a vanished backend resource. */
async function orNotFound<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof BackendGoneError) throw notFound(what);
    throw err;
  }
}

export const dbaasRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/dbaas',
    operationId: 'listDbaas',
    summary: 'List database services',
    description:
      "From the control plane's database: `engine`, `version`, `state`, `host` and `plan` are `null`, and `capabilities` leaves out `databases` and `users` (absent means not queried, which differs from `false`). Read one service for live values.",
    tag: TAG,
    scope: 'dbaas:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of database services, newest first', schema: listOf(DbaasSchema, 'DbaasList') }],
    async handler({ query, principal, deps }) {
      const qb = visibleDbaasQuery(deps.db, principal);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('dbaas', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((row) => presentDbaas(row, null)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dbaas/{id}',
    operationId: 'getDbaas',
    summary: 'Get a database service with its live state',
    description:
      'Live fields come from the instance; when it does not answer in time, `version`, `state` and `host` are `null`, `capabilities` leaves out `databases` and `users`, and the call still succeeds.',
    tag: TAG,
    scope: 'dbaas:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The database service', schema: DbaasSchema }],
    async handler({ params, principal, deps }) {
      const { service, instance } = await findVisibleDbaas(deps.db, principal, params.id);
      const live = instance?.ready_at ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.dbaas.status(instance.instance)) : null;
      return { body: presentDbaas(service, { instance, live }) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dbaas/{id}/connection',
    operationId: 'getDbaasConnection',
    summary: 'Get how to connect to a database service',
    description:
      "Host, port, default database, admin username, TLS mode and the CA certificate that signed the server's certificate. Never a password, nor a URI containing one (see POST .../credentials). From the control plane's records: it answers while the instance is down.",
    tag: TAG,
    scope: 'dbaas:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'Connection details', schema: DbaasConnectionSchema }, NO_INSTANCE],
    async handler({ params, principal, deps }) {
      const { instance } = await instanceTarget(deps, principal, params.id, null);
      return { body: presentConnection(instance) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/dbaas/{id}/credentials',
    operationId: 'revealDbaasCredentials',
    summary: 'Reveal the admin password of a database service',
    description:
      'Returns the admin user and its password in clear; rotates nothing. A POST on purpose: not cacheable, audited as a mutation, never replayed by Idempotency-Key. The password is kept sealed at rest.',
    tag: TAG,
    scope: 'dbaas:credentials',
    marks: [],
    returnsSecret: true,
    params: idParams,
    responses: [{ status: 200, description: 'The admin credentials', schema: DbaasCredentialsSchema }, NO_INSTANCE],
    async handler({ params, principal, deps }) {
      const { instance } = await instanceTarget(deps, principal, params.id, 'credentials', 'revealing the admin credentials');
      return { body: { object: 'dbaas_credentials' as const, username: instance.admin_username, password: adminPassword(deps.keyring, instance) } };
    },
  }),
  defineBackendList({
    path: '/v1/dbaas/{id}/databases',
    operationId: 'listDbaasDatabases',
    summary: 'List the databases of a database service',
    description: 'Read from the instance (system databases left out), by name. `owner` on PostgreSQL, `charset` and `collation` on MySQL.',
    tag: TAG,
    scope: 'dbaas:read',
    params: idParams,
    item: DbaasDatabaseSchema,
    listId: 'DbaasDatabaseList',
    listed: 'Databases',
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'databases')).instance,
    items: (instance, deps) => deps.providers.dbaas.listDatabases(instance.instance),
    list: (instance) => listFingerprint(`dbaas.databases:${instance.service_id}`, {}),
    sortKey: (d) => d.name,
    present: presentDatabase,
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/dbaas/{id}/databases',
    operationId: 'createDbaasDatabase',
    summary: 'Create a database',
    description:
      "Body `name`; `owner` applies to PostgreSQL only (a user of the instance, never the engine's own superuser or predefined roles; default the admin), `charset` and `collation` to MySQL only; each engine ignores the others'. The response has no size or table count. `409 conflict` when it exists.",
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['R', 'I'],
    params: idParams,
    body: CreateDatabaseBody,
    exampleBody: { name: 'shop' },
    answer: { status: 201, description: 'The database', schema: DbaasDatabaseSchema },
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'databases', 'creating a database')).instance,
    async write(instance, { body, deps }) {
      const check = checkDatabaseName(body.name, instance.engine);
      if (!check.ok) throw validationFailed([{ param: 'name', message: check.message }]);
      // The owner is a user of the instance: never the engine's superuser or a predefined role.
      const owner = body.owner !== undefined && instance.engine === 'postgresql' ? checkUsername(body.owner, instance.engine) : null;
      if (owner && !owner.ok) throw validationFailed([{ param: 'owner', message: owner.message }]);
      const spec =
        instance.engine === 'postgresql' ? { name: body.name, owner: body.owner } : { name: body.name, charset: body.charset, collation: body.collation };
      return presentDatabase(await deps.providers.dbaas.createDatabase(instance.instance, spec));
    },
  }),
  defineSyncWrite({
    method: 'delete',
    path: '/v1/dbaas/{id}/databases/{name}',
    operationId: 'deleteDbaasDatabase',
    summary: 'Drop a database',
    description:
      "Drops the database and everything in it; its open sessions are ended first. `404` when there is no such database, `400` for one of the engine's own (`postgres`, `template1`, `mysql`...).",
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['D', 'I'],
    params: databaseParams,
    answer: { status: 204, description: 'Dropped' },
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'databases', 'dropping a database')).instance,
    async write(instance, { params, deps }) {
      const check = checkDatabaseName(params.name, instance.engine);
      if (!check.ok) throw validationFailed([{ param: 'name', message: check.message }]);
      await orNotFound('database', () => deps.providers.dbaas.deleteDatabase(instance.instance, params.name));
    },
  }),
  defineBackendList({
    path: '/v1/dbaas/{id}/users',
    operationId: 'listDbaasUsers',
    summary: 'List the users of a database service',
    description:
      "Read from the instance, the admin included (`is_admin`); the engine's and the control plane's own accounts are left out. On MySQL the same name may appear with several hosts: the `user@host` pair is the user's `id`.",
    tag: TAG,
    scope: 'dbaas:read',
    params: idParams,
    item: DbaasUserSchema,
    listId: 'DbaasUserList',
    listed: 'Users',
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'users')).instance,
    items: (instance, deps) => deps.providers.dbaas.listUsers(instance.instance),
    list: (instance) => listFingerprint(`dbaas.users:${instance.service_id}`, {}),
    sortKey: (u) => u.id,
    present: presentUser,
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/dbaas/{id}/users',
    operationId: 'createDbaasUser',
    summary: 'Create a user',
    description:
      'Body `username` and `password` (12 to 128 characters). The password goes to the engine and nowhere else: it is not stored, not returned, not logged. On MySQL the user is `username@%`. `409 conflict` when it exists.',
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['R', 'I'],
    params: idParams,
    body: CreateUserBody,
    exampleBody: { username: 'app', password: 'a long and random passphrase' },
    answer: { status: 201, description: 'The user', schema: DbaasUserSchema },
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'users', 'creating a user')).instance,
    async write(instance, { body, deps }) {
      const check = checkUsername(body.username, instance.engine);
      if (!check.ok) throw validationFailed([{ param: 'username', message: check.message }]);
      return presentUser(await deps.providers.dbaas.createUser(instance.instance, { username: body.username, password: body.password }));
    },
  }),
  defineSyncWrite({
    method: 'delete',
    path: '/v1/dbaas/{id}/users/{username}',
    operationId: 'deleteDbaasUser',
    summary: 'Delete a user',
    description:
      "Ends the user's open sessions, then removes it; deletes no data (on PostgreSQL what it owned passes to the admin). On MySQL a name alone removes every host of that name, `user@host` one account. The admin cannot be deleted (`409`). `404` when there is no such user; `400` for the engine's and the control plane's own accounts (`postgres`, `pg_*`, `root`...), which are never listed.",
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['D', 'I'],
    params: userParams,
    answer: { status: 204, description: 'Deleted' },
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'users', 'deleting a user')).instance,
    async write(instance, { params, deps }) {
      const ref = userRef(params.username, instance.engine);
      await orNotFound('user', () => deps.providers.dbaas.deleteUser(instance.instance, ref));
    },
  }),
  defineSyncWrite({
    method: 'post',
    path: '/v1/dbaas/{id}/users/{username}/password',
    operationId: 'setDbaasUserPassword',
    summary: "Change a user's password",
    description:
      "Body `password`. Effective immediately for new logins; works for the admin user too (POST .../credentials then returns the new one). The password is not stored (the admin's is kept sealed), not returned, not logged. `400` for the engine's and the control plane's own accounts.",
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['R', 'I'],
    params: userParams,
    body: PasswordBody,
    exampleBody: { password: 'another long passphrase' },
    answer: { status: 204, description: 'Changed' },
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'users', 'changing a password')).instance,
    async write(instance, { params, body, deps }) {
      const ref = userRef(params.username, instance.engine);
      const isAdmin = ref.username === instance.admin_username && (ref.host === undefined || ref.host === '%' || instance.engine === 'postgresql');
      const onEngine = () => orNotFound('user', () => deps.providers.dbaas.setPassword(instance.instance, ref, body.password));
      // The admin's sealed copy changes with the engine's: credentials never hands out a stale password.
      if (isAdmin) await changeAdminPassword(deps.db, deps.keyring, instance.service_id, body.password, onEngine);
      else await onEngine();
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/dbaas/{id}/restart',
    operationId: 'restartDbaas',
    summary: 'Restart a database service',
    description:
      'Stops and starts the server: every open connection is dropped. Answers `202` with a `dbaas.restart` operation that is already complete (the restart happens before the answer).',
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['R', 'I'],
    params: idParams,
    responses: [{ status: 202, description: 'The completed `dbaas.restart` operation', schema: OperationSchema }, NO_INSTANCE],
    async handler({ params, principal, deps }) {
      const { target, instance } = await instanceTarget(deps, principal, params.id, 'restart', 'a restart');
      await deps.providers.dbaas.restartInstance(instance.instance);
      const status = await deps.providers.dbaas.status(instance.instance);
      const op = await deps.operations.recordCompleted({
        principal,
        type: 'dbaas.restart',
        resource: resourceOf(target),
        serviceId: instance.service_id,
        status: 'succeeded',
        result: { state: status.state, uptime_seconds: status.uptimeSeconds },
      });
      return accepted(op);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dbaas/{id}/logs',
    operationId: 'getDbaasLogs',
    summary: 'Tail the engine log of a database service',
    description: "The last `lines` entries (default 100, at most 1000) of the engine's own log, oldest to newest. Statements are never written to it.",
    tag: TAG,
    scope: 'dbaas:read',
    marks: [],
    params: idParams,
    query: LogsQuery,
    responses: [{ status: 200, description: 'Log entries, oldest first (one page)', schema: listOf(DbaasLogEntrySchema, 'DbaasLogList') }, NO_INSTANCE],
    async handler({ params, query, principal, deps }) {
      const { instance } = await instanceTarget(deps, principal, params.id, 'logs');
      const entries = await deps.providers.dbaas.logs(instance.instance, query.lines);
      return { body: listEnvelope(entries.map(presentLogEntry), { hasMore: false, nextCursor: null }) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dbaas/{id}/stats',
    operationId: 'getDbaasStats',
    summary: 'Get statistics of a database service',
    description:
      "A snapshot read from the engine's own statistics views (PostgreSQL `pg_stat_*`, MariaDB global status); a figure the engine does not keep is `null`.",
    tag: TAG,
    scope: 'dbaas:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'Statistics', schema: DbaasStatsSchema }, NO_INSTANCE],
    async handler({ params, principal, deps }) {
      const { instance } = await instanceTarget(deps, principal, params.id, 'stats');
      return { body: presentStats(await deps.providers.dbaas.stats(instance.instance)) };
    },
  }),
  defineBackendList({
    path: '/v1/dbaas/{id}/backups',
    operationId: 'listDbaasBackups',
    summary: 'List the backups of a database service',
    description:
      "Newest first, with `status` (`running`, `completed`, `failed`) and `size_bytes` once completed. A backup is a dump made by the engine's own tool (pg_dumpall, mariadb-dump).",
    tag: TAG,
    scope: 'dbaas:read',
    params: idParams,
    item: DbaasBackupSchema,
    listId: 'DbaasBackupList',
    listed: 'Backups',
    otherResponses: [NO_INSTANCE],
    target: async ({ params, principal, deps }) => (await instanceTarget(deps, principal, params.id, 'backups')).instance,
    items: (instance, deps) => deps.providers.dbaas.listBackups(instance.instance),
    list: (instance) => listFingerprint(`dbaas.backups:${instance.service_id}`, {}),
    sortKey: backupSortKey,
    present: presentBackup,
  }),
  defineAsyncAction({
    path: '/v1/dbaas/{id}/backups',
    operationId: 'createDbaasBackup',
    summary: 'Back up a database service',
    description:
      'Answers `202` as the dump starts (`503` when the instance does not answer; while the host it runs on is down, `202`, and the operation says in `result.waiting` that it waits for the host). The `dbaas.backup` operation carries `result.backup_id` at once and succeeds when the backup is on the list as `completed`, with `result.size_bytes`; it fails (`upstream_error`) when the dump tool does not finish.',
    tag: TAG,
    scope: 'dbaas:write',
    marks: ['R', 'A', 'I'],
    params: idParams,
    operation: 'dbaas.backup',
    otherResponses: [NO_INSTANCE],
    async start({ params, principal, deps }) {
      const { target, instance } = await instanceTarget(deps, principal, params.id, 'backups', 'a backup');
      // Accepted only while the instance answers (503 otherwise), so the 202 means the dump can start;
      // except while its host is down, when the operation waits for the host (docs/hosts.md).
      if ((await deps.providers.hosts.locate(instance.service_id))?.status !== 'down') await deps.providers.dbaas.status(instance.instance);
      return startOperation(deps, principal, {
        type: 'dbaas.backup',
        input: { serviceId: instance.service_id, instance: instance.instance },
        resource: resourceOf(target),
        serviceId: instance.service_id,
        initialStatus: 'running',
      });
    },
  }),
];
