import { describe, expect, it } from 'vitest';
import { checkCharset, checkDatabaseName, checkPassword, checkUsername, parseUserId } from '../domain/dbaas/validation';
import { PostgresEngine } from '../providers/dbinstances/postgresql.engine';
import { MariaDbEngine } from '../providers/dbinstances/mariadb.engine';
import { mysqlNativePasswordHash, scramSha256Verifier } from '../providers/dbinstances/password-verifiers';

describe('DBaaS names and passwords (DECISIONS "DBaaS")', () => {
  it('accepts ^[a-z_][a-z0-9_]{0,62}$ and nothing else', () => {
    for (const ok of ['a', '_', 'shop', 'shop_2', `a${'b'.repeat(62)}`]) expect(checkDatabaseName(ok)).toEqual({ ok: true });
    for (const bad of ['', '1shop', 'Shop', 'shop-2', 'shop.2', 'sh op', `a${'b'.repeat(63)}`, 'é']) expect(checkDatabaseName(bad).ok).toBe(false);
    expect(checkUsername('bob_1')).toEqual({ ok: true });
    expect(checkUsername('Bob').ok).toBe(false);
  });

  it('refuses the names the engines keep for themselves', () => {
    expect(checkDatabaseName('postgres', 'postgresql').ok).toBe(false);
    expect(checkDatabaseName('postgres', 'mysql').ok).toBe(true);
    expect(checkDatabaseName('mysql', 'mysql').ok).toBe(false);
    expect(checkDatabaseName('information_schema', 'mysql').ok).toBe(false);
    expect(checkUsername('root', 'mysql').ok).toBe(false);
    expect(checkUsername('postgres', 'postgresql').ok).toBe(false);
    expect(checkUsername('pg_monitor').ok).toBe(false);
    // Role names PostgreSQL refuses itself (42939): a clear 400 here, never the engine's 500.
    for (const name of ['none', 'current_user', 'current_role', 'session_user']) expect(checkUsername(name, 'postgresql').ok).toBe(false);
  });

  it('takes passwords of 12 to 128 characters, counted as characters', () => {
    expect(checkPassword('x'.repeat(11)).ok).toBe(false);
    expect(checkPassword('x'.repeat(12))).toEqual({ ok: true });
    expect(checkPassword('x'.repeat(128))).toEqual({ ok: true });
    expect(checkPassword('x'.repeat(129)).ok).toBe(false);
    expect(checkPassword('🔑'.repeat(12))).toEqual({ ok: true });
    expect(checkPassword('abc\u0000defghijkl').ok).toBe(false);
  });

  it('reads user ids as name or MySQL user@host', () => {
    expect(parseUserId('bob')).toEqual({ username: 'bob' });
    expect(parseUserId('bob@%')).toEqual({ username: 'bob', host: '%' });
    expect(parseUserId('bob@10.0.0.%')).toEqual({ username: 'bob', host: '10.0.0.%' });
    expect(parseUserId('Bob@%')).toBeNull();
    expect(parseUserId('bob@')).toBeNull();
    expect(parseUserId('bob@a b')).toBeNull();
    expect(checkCharset('utf8mb4_unicode_ci')).toEqual({ ok: true });
    expect(checkCharset('utf8; drop').ok).toBe(false);
  });
});

describe('engine log parsing', () => {
  it('PostgreSQL: entries with their DETAIL/STATEMENT lines and tab-continued lines, in UTC', () => {
    const entries = new PostgresEngine('/nonexistent').parseLog([
      '\tcontinuation of an entry cut off above',
      '2026-11-23 10:00:00.123 UTC [42] LOG:  database system is ready to accept connections',
      '2026-11-23 10:00:01.000 UTC [43] ERROR:  relation "x" does not exist at character 15',
      '2026-11-23 10:00:01.000 UTC [43] HINT:  Perhaps you meant "y".',
      '2026-11-23 10:00:02.500 UTC [44] FATAL:  password authentication failed for user "bob"',
      '2026-11-23 10:00:02.500 UTC [44] DETAIL:  Connection matched pg_hba.conf line 4',
      '\tsecond line of the detail',
      '2026-11-23 10:00:03.000 UTC [45] WARNING:  something odd',
    ]);
    expect(entries).toEqual([
      { timestamp: '2026-11-23T10:00:00.123Z', level: 'info', message: 'database system is ready to accept connections' },
      { timestamp: '2026-11-23T10:00:01.000Z', level: 'error', message: 'relation "x" does not exist at character 15\nHINT: Perhaps you meant "y".' },
      {
        timestamp: '2026-11-23T10:00:02.500Z',
        level: 'fatal',
        message: 'password authentication failed for user "bob"\nDETAIL: Connection matched pg_hba.conf line 4\nsecond line of the detail',
      },
      { timestamp: '2026-11-23T10:00:03.000Z', level: 'warning', message: 'something odd' },
    ]);
  });

  it('MariaDB: levels mapped, space-padded hours, unprefixed lines continue the entry', () => {
    const entries = new MariaDbEngine().parseLog([
      '2026-11-23  9:05:01 0 [Note] /usr/sbin/mariadbd: ready for connections.',
      "Version: '10.11.19-MariaDB'  socket: '/x/mariadbd.sock'  port: 40000  Debian 12",
      "2026-11-23 10:00:00 5 [Warning] Access denied for user 'bob'@'127.0.0.1' (using password: YES)",
      '2026-11-23 10:00:01 0 [ERROR] Something failed',
    ]);
    expect(entries).toEqual([
      {
        timestamp: '2026-11-23T09:05:01.000Z',
        level: 'info',
        message: "/usr/sbin/mariadbd: ready for connections.\nVersion: '10.11.19-MariaDB'  socket: '/x/mariadbd.sock'  port: 40000  Debian 12",
      },
      { timestamp: '2026-11-23T10:00:00.000Z', level: 'warning', message: "Access denied for user 'bob'@'127.0.0.1' (using password: YES)" },
      { timestamp: '2026-11-23T10:00:01.000Z', level: 'error', message: 'Something failed' },
    ]);
  });
});

describe('password verifiers (what reaches the engines instead of the password)', () => {
  it('PostgreSQL SCRAM-SHA-256 matches the RFC 7677 construction', () => {
    const salt = Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64');
    // Known answer: RFC 7677's example (password "pencil", this salt, 4096 iterations) as PostgreSQL stores it.
    expect(scramSha256Verifier('pencil', salt)).toBe(
      'SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=',
    );
    expect(scramSha256Verifier('pencil')).not.toBe(scramSha256Verifier('pencil'));
  });

  it('MySQL native password hash', () => {
    // Known answer: SELECT PASSWORD('password') on MariaDB.
    expect(mysqlNativePasswordHash('password')).toBe('*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19');
  });
});
