import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import type { DbaasInstanceRow } from '../../../domain/dbaas/store';
import { CHARSET_PATTERN, DB_NAME_PATTERN, checkPassword, PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH } from '../../../domain/dbaas/validation';
import type { ServiceRow } from '../../../domain/services';
import type { DbBackup, DbDatabase, DbInstanceStatus, DbLogEntry, DbStats, DbUser } from '../../../providers/dbaas.provider';
import { idParam } from '../../schemas';

/**
 * The DBaaS family's request and response schemas (one schema: validation, handler types, OpenAPI)
 * and the presenters that build the responses from records and live state.
 */
const nullableNumber = z.number().nullable();
const ENGINES = ['postgresql', 'mysql'] as const;

export const DbaasSchema = z
  .object({
    object: z.literal('dbaas'),
    id: z.string().meta({ description: 'The service id' }),
    name: z.string().nullable().meta({ description: "The service's label (its name in the catalog when it has none)" }),
    engine: z.enum(ENGINES).nullable().meta({ description: '`mysql` runs MariaDB. Null in lists' }),
    version: z.string().nullable().meta({ description: "Live: the server's version. Null in lists and when the instance does not answer" }),
    state: z.enum(['running']).nullable().meta({ description: 'Live: `running` when the instance answers; null in lists and when it does not' }),
    host: z
      .string()
      .nullable()
      .meta({ description: 'Live: where the instance accepts clients (with `port` of /connection). Null in lists and when it does not answer' }),
    plan: z.string().nullable().meta({ description: 'The catalog product. Null in lists' }),
    capabilities: z.record(z.string(), z.boolean()).meta({
      description: 'Lists, and reads whose instance does not answer, leave out `databases` and `users`: absent means not queried, which differs from false',
    }),
    created_at: z.string().nullable(),
  })
  .meta({ id: 'Dbaas' });

export const DbaasConnectionSchema = z
  .object({
    object: z.literal('dbaas_connection'),
    host: z.string(),
    port: z.number().int(),
    database: z.string().nullable().meta({ description: 'The database a client lands in (`postgres`); null on MySQL, which needs none' }),
    username: z.string().meta({ description: 'The admin user' }),
    tls_mode: z
      .literal('verify-full')
      .meta({ description: 'The server accepts TLS only, with a certificate for `host` signed by `ca_certificate`: verify both' }),
    ca_certificate: z.string().meta({ description: 'PEM' }),
  })
  .meta({ id: 'DbaasConnection' });

export const DbaasCredentialsSchema = z
  .object({ object: z.literal('dbaas_credentials'), username: z.string(), password: z.string().meta({ description: 'The admin password, in clear' }) })
  .meta({ id: 'DbaasCredentials' });

export const DbaasDatabaseSchema = z
  .object({
    object: z.literal('dbaas_database'),
    name: z.string(),
    owner: z.string().nullable().meta({ description: 'PostgreSQL only' }),
    charset: z.string().nullable().meta({ description: 'MySQL only' }),
    collation: z.string().nullable().meta({ description: 'MySQL only' }),
  })
  .meta({ id: 'DbaasDatabase' });

export const DbaasUserSchema = z
  .object({
    object: z.literal('dbaas_user'),
    id: z.string().meta({ description: '`user@host` on MySQL (the same name may have several hosts), the name on PostgreSQL' }),
    username: z.string(),
    host: z.string().nullable().meta({ description: 'MySQL only' }),
    is_admin: z.boolean(),
  })
  .meta({ id: 'DbaasUser' });

export const DbaasBackupSchema = z
  .object({
    object: z.literal('dbaas_backup'),
    id: z.string(),
    status: z.enum(['running', 'completed', 'failed']),
    size_bytes: nullableNumber.meta({ description: 'Null until completed' }),
    created_at: z.string(),
  })
  .meta({ id: 'DbaasBackup' });

export const DbaasLogEntrySchema = z
  .object({
    timestamp: z.string().meta({ description: 'ISO 8601, UTC' }),
    level: z.enum(['debug', 'info', 'notice', 'warning', 'error', 'fatal']),
    message: z.string(),
  })
  .meta({ id: 'DbaasLogEntry' });

export const DbaasStatsSchema = z
  .object({
    object: z.literal('dbaas_stats'),
    uptime_seconds: z.number(),
    connections: z.object({ current: z.number(), active: nullableNumber, max: z.number() }),
    databases: z.number(),
    size_bytes: z.number(),
    transactions: z.object({ committed: nullableNumber, rolled_back: nullableNumber }),
    queries: nullableNumber,
    rows: z.object({ returned: nullableNumber, inserted: nullableNumber, updated: nullableNumber, deleted: nullableNumber }),
    cache_hit_ratio: nullableNumber,
    deadlocks: nullableNumber,
    bytes: z.object({ received: nullableNumber, sent: nullableNumber }),
  })
  .meta({ id: 'DbaasStats', description: "A snapshot of the engine's own statistics views; a figure the engine does not keep is null" });

const nameMessage = 'must be 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit';
const dbName = () => z.string().regex(DB_NAME_PATTERN, nameMessage);
const password = () =>
  z
    .string()
    .refine((p) => checkPassword(p).ok, `must be ${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters`)
    .meta({ description: `${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters. Handed to the engine only: never stored, returned or logged` });
const charset = () => z.string().regex(CHARSET_PATTERN, 'must be a name such as utf8mb4 or utf8mb4_unicode_ci');

export const idParams = z.object({ id: idParam('svc_1') });
export const databaseParams = z.object({ id: idParam('svc_1'), name: dbName().meta({ example: 'shop', description: "The database's name" }) });
export const userParams = z.object({
  id: idParam('svc_1'),
  username: z.string().min(1).max(320).meta({
    example: 'app',
    description: "The user's name, or on MySQL its `user@host` id (URL-encoded: `app%40%25`); a name alone means every host of that name",
  }),
});

export const CreateDatabaseBody = z
  .object({
    name: dbName().meta({ description: "The new database's name" }),
    owner: dbName().optional().meta({ description: 'PostgreSQL: the owning user (default: the admin); other engines ignore it' }),
    charset: charset().optional().meta({ description: 'MySQL: the default character set (default utf8mb4); other engines ignore it' }),
    collation: charset().optional().meta({ description: 'MySQL: the default collation; other engines ignore it' }),
  })
  .strict();
export const CreateUserBody = z
  .object({ username: dbName().meta({ description: "The new user's name (on MySQL the account is `username@%`)" }), password: password() })
  .strict();
export const PasswordBody = z.object({ password: password() }).strict();
export const LogsQuery = z.object({
  lines: z.coerce.number().int().min(1).max(1000).default(100).meta({ description: 'How many of the last entries, 1 to 1000 (default 100)' }),
});

/** Capabilities a list or a failed live read cannot vouch for: absent, not false. */
const LIVE_ONLY_CAPABILITIES = ['databases', 'users'];
const withoutLiveOnly = (caps: Record<string, boolean>) => Object.fromEntries(Object.entries(caps).filter(([k]) => !LIVE_ONLY_CAPABILITIES.includes(k)));

/** A list item (`live` absent), or a single read with its live status (null when the instance did not answer). */
export function presentDbaas(
  service: ServiceRow,
  detail: { instance: DbaasInstanceRow | null; live: DbInstanceStatus | null } | null,
): z.input<typeof DbaasSchema> {
  const caps = service.capabilities ?? {};
  const live = detail?.live ?? null;
  return {
    object: 'dbaas',
    id: formatId('svc', service.id),
    name: service.label ?? service.name,
    engine: detail ? (live?.engine ?? detail.instance?.engine ?? null) : null,
    version: live?.version ?? null,
    state: live?.state ?? null,
    host: live?.host ?? null,
    plan: detail ? service.product : null,
    capabilities: live ? caps : withoutLiveOnly(caps),
    created_at: iso(service.created_at),
  };
}

export const presentConnection = (row: DbaasInstanceRow): z.input<typeof DbaasConnectionSchema> => ({
  object: 'dbaas_connection',
  host: row.host ?? '',
  port: row.port ?? 0,
  database: row.default_database,
  username: row.admin_username,
  tls_mode: 'verify-full',
  ca_certificate: row.ca_certificate ?? '',
});

export const presentDatabase = (d: DbDatabase): z.input<typeof DbaasDatabaseSchema> => ({ object: 'dbaas_database', ...d });

export const presentUser = (u: DbUser): z.input<typeof DbaasUserSchema> => ({
  object: 'dbaas_user',
  id: u.id,
  username: u.username,
  host: u.host,
  is_admin: u.isAdmin,
});

export const presentBackup = (b: DbBackup): z.input<typeof DbaasBackupSchema> => ({
  object: 'dbaas_backup',
  id: b.id,
  status: b.status,
  size_bytes: b.sizeBytes,
  created_at: b.createdAt.toISOString(),
});

export const presentLogEntry = (e: DbLogEntry): z.input<typeof DbaasLogEntrySchema> => ({ timestamp: e.timestamp, level: e.level, message: e.message });

export const presentStats = (s: DbStats): z.input<typeof DbaasStatsSchema> => ({
  object: 'dbaas_stats',
  uptime_seconds: s.uptimeSeconds,
  connections: s.connections,
  databases: s.databases,
  size_bytes: s.sizeBytes,
  transactions: { committed: s.transactions.committed, rolled_back: s.transactions.rolledBack },
  queries: s.queries,
  rows: s.rows,
  cache_hit_ratio: s.cacheHitRatio,
  deadlocks: s.deadlocks,
  bytes: s.bytes,
});

/** Newest first, then by id. */
export const backupSortKey = (b: DbBackup) => `${String(9_999_999_999_999 - b.createdAt.getTime()).padStart(13, '0')}|${b.id}`;
