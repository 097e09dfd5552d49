/**
 * The rules for what customers may name and set on a database service (DECISIONS "DBaaS"), pure
 * so that the API's zod schemas, the provider implementations and the tests share them.
 */
import type { DbEngine } from '../../providers/dbaas.provider';
import { DB_NAME_PATTERN } from '../../providers/dbaas.names';

/** Databases and users: a lower-case SQL identifier that needs no quoting on either engine. */
export { DB_NAME_PATTERN };
export const PASSWORD_MIN_LENGTH = 12;
export const PASSWORD_MAX_LENGTH = 128;
/** MySQL character sets and collations (`utf8mb4`, `utf8mb4_unicode_ci`). */
export const CHARSET_PATTERN = /^[a-z0-9_]{1,64}$/;
/** The host part of a MySQL account: `%`, an address, a name, with `%`/`_` wildcards. */
export const MYSQL_HOST_PATTERN = /^[A-Za-z0-9.%_:-]{1,255}$/;

/**
 * Names the engine or the control plane uses itself. A customer can neither create nor drop them,
 * set their passwords or make one a database's owner: every path parameter and body field that
 * names a user or a database goes through checkDatabaseName / checkUsername / checkUserRef (400
 * `validation_failed` with `param`). The engines refuse those accounts again by what they are, not
 * only by name (postgresql.engine.ts, mariadb.engine.ts).
 */
const RESERVED_DATABASES: Record<DbEngine, readonly string[]> = {
  postgresql: ['postgres', 'template0', 'template1'],
  mysql: ['mysql', 'information_schema', 'performance_schema', 'sys'],
};
const RESERVED_USERS: Record<DbEngine, readonly string[]> = {
  // `postgres` is each instance's bootstrap superuser, reached only over its private socket;
  // `public` is the pseudo-role every role belongs to.
  postgresql: ['postgres', 'public', 'none', 'current_user', 'current_role', 'session_user'],
  // `root` is the control plane's, `mysql` the account Debian's install makes for the server's OS account.
  mysql: ['root', 'mysql', 'public'],
};

export type Check = { ok: true } | { ok: false; message: string };
const ok: Check = { ok: true };

export function checkDatabaseName(name: string, engine?: DbEngine): Check {
  if (!DB_NAME_PATTERN.test(name))
    return { ok: false, message: 'must be 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit' };
  if (engine ? RESERVED_DATABASES[engine].includes(name) : Object.values(RESERVED_DATABASES).some((l) => l.includes(name)))
    return { ok: false, message: `"${name}" is reserved by the database server` };
  return ok;
}

export function checkUsername(name: string, engine?: DbEngine): Check {
  if (!DB_NAME_PATTERN.test(name))
    return { ok: false, message: 'must be 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit' };
  if (name.startsWith('pg_')) return { ok: false, message: 'names starting with "pg_" are reserved by PostgreSQL' };
  if (engine ? RESERVED_USERS[engine].includes(name) : Object.values(RESERVED_USERS).some((l) => l.includes(name)))
    return { ok: false, message: `"${name}" is reserved by the database server` };
  return ok;
}

/**
 * A user named in a path (`users/{username}`), parsed by parseUserId: its name must be one a
 * customer could have created, and on PostgreSQL it has no host part.
 */
export function checkUserRef(ref: { username: string; host?: string }, engine: DbEngine): Check {
  const name = checkUsername(ref.username, engine);
  if (!name.ok) return name;
  if (ref.host !== undefined && engine === 'postgresql') return { ok: false, message: 'a PostgreSQL user is named without a host' };
  return ok;
}

/** Length is counted in characters (code points), as a person counts them. */
export function checkPassword(password: string): Check {
  const length = [...password].length;
  if (length < PASSWORD_MIN_LENGTH || length > PASSWORD_MAX_LENGTH)
    return { ok: false, message: `must be ${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters` };
  if (password.includes('\u0000')) return { ok: false, message: 'must not contain U+0000' };
  return ok;
}

export function checkCharset(value: string): Check {
  return CHARSET_PATTERN.test(value) ? ok : { ok: false, message: 'must be a character set or collation name such as utf8mb4 or utf8mb4_unicode_ci' };
}

/**
 * A user path segment: `name` on either engine, or `name@host` (a MySQL user id). Returns null when
 * it is neither.
 */
export function parseUserId(id: string): { username: string; host?: string } | null {
  const at = id.indexOf('@');
  if (at === -1) return DB_NAME_PATTERN.test(id) ? { username: id } : null;
  const username = id.slice(0, at);
  const host = id.slice(at + 1);
  return DB_NAME_PATTERN.test(username) && MYSQL_HOST_PATTERN.test(host) ? { username, host } : null;
}
