import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendUnavailableError } from '../providers/errors';
import { NamespaceMissingError, ScriptParamsError, SqlError, SqlNameError, SqlParamsError, SqlReadOnlyError } from '../providers/sqldb.provider';
import { SqliteEngine, workerIndexOf } from '../providers/sqlite/sqlite.engine';

/**
 * The db primitive's engine on real node:sqlite files in a temporary folder, through its worker
 * processes: queries and their metering, scripts as one transaction, and the confinement of a
 * tenant's SQL to its own file (each exploit of docs/research/serverless-backends.md §2 is a test),
 * the time limit, and the limits on what one answer or value may hold.
 */
let root: string;
let engine: SqliteEngine;

/** Another tenant whose databases live in a different worker than `tenant`'s (2 workers). */
function tenantOnOtherWorker(tenant: string): string {
  for (let i = 0; ; i++) if (workerIndexOf(`other${i}`, 2) !== workerIndexOf(tenant, 2)) return `other${i}`;
}

async function sqlError(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SqlError);
  return (err as Error).message;
}

beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), 'sqlite-engine-'));
  engine = new SqliteEngine({ rootDir: root, maxResultRows: 100, maxResultBytes: 64 * 1024 });
});
afterAll(async () => {
  await engine?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('SQLite engine: queries', () => {
  it('creates a namespace once, in a 0700 folder, as a 0600 file', async () => {
    expect(await engine.createNamespace('t1', 'main')).toBe(true);
    expect(await engine.createNamespace('t1', 'main')).toBe(false);
    expect(statSync(path.join(root, 't1')).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(root, 't1', 'main.db')).mode & 0o777).toBe(0o600);
  });

  it('runs create, insert, select, update and delete with their changes, rowids and metering', async () => {
    const created = await engine.query('t1', 'main', 'CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER)');
    expect(created).toEqual({ results: [{ columns: [], rows: [], changes: 0, last_insert_rowid: null }], rowsRead: 0, rowsWritten: 0 });

    const one = await engine.query('t1', 'main', 'INSERT INTO users (name, age) VALUES (?, ?)', ['ann', 31]);
    expect(one).toEqual({ results: [{ columns: [], rows: [], changes: 1, last_insert_rowid: 1 }], rowsRead: 0, rowsWritten: 1 });
    const two = await engine.query('t1', 'main', "INSERT INTO users (name, age) VALUES ('bob', 17), ('cy', 45)");
    expect(two.results[0]).toMatchObject({ changes: 2, last_insert_rowid: 3 });
    expect(two.rowsWritten).toBe(2);

    const read = await engine.query('t1', 'main', 'SELECT id, name, age FROM users WHERE age > ? ORDER BY id', [18]);
    expect(read).toEqual({
      results: [
        {
          columns: ['id', 'name', 'age'],
          rows: [
            { id: 1, name: 'ann', age: 31 },
            { id: 3, name: 'cy', age: 45 },
          ],
          changes: 0,
          last_insert_rowid: null,
        },
      ],
      rowsRead: 2,
      rowsWritten: 0,
    });

    const updated = await engine.query('t1', 'main', 'UPDATE users SET age = age + 1 WHERE age < 40');
    expect(updated).toEqual({ results: [{ columns: [], rows: [], changes: 2, last_insert_rowid: null }], rowsRead: 0, rowsWritten: 2 });
    const deleted = await engine.query('t1', 'main', "DELETE FROM users WHERE name = 'bob'");
    expect(deleted.results[0]).toMatchObject({ changes: 1, last_insert_rowid: null });
    expect(deleted.rowsWritten).toBe(1);

    // DDL after a write reports no changes (sqlite3_changes would still say 1).
    const index = await engine.query('t1', 'main', 'CREATE INDEX users_age ON users (age)');
    expect(index.results[0].changes).toBe(0);
    expect(index.rowsWritten).toBe(0);
  });

  it('gives the columns of a SELECT that returns no rows', async () => {
    const empty = await engine.query('t1', 'main', 'SELECT id, name AS who FROM users WHERE id < 0');
    expect(empty.results).toEqual([{ columns: ['id', 'who'], rows: [], changes: 0, last_insert_rowid: null }]);
    expect(empty.rowsRead).toBe(0);
  });

  it('counts INSERT … RETURNING rows as read and written, and rows a trigger writes', async () => {
    const returning = await engine.query('t1', 'main', "INSERT INTO users (name, age) VALUES ('dee', 19) RETURNING id, name");
    expect(returning.results[0]).toEqual({ columns: ['id', 'name'], rows: [{ id: 4, name: 'dee' }], changes: 1, last_insert_rowid: 4 });
    expect(returning).toMatchObject({ rowsRead: 1, rowsWritten: 1 });

    await engine.query(
      't1',
      'main',
      'CREATE TABLE audit (what TEXT); CREATE TRIGGER users_audit AFTER UPDATE ON users BEGIN INSERT INTO audit VALUES (new.name); END;',
    );
    const viaTrigger = await engine.query('t1', 'main', "UPDATE users SET age = 20 WHERE name = 'dee'");
    expect(viaTrigger.results[0].changes).toBe(1);
    expect(viaTrigger.rowsWritten).toBe(2);
  });

  it('binds positional and named params, booleans as 1 / 0', async () => {
    const positional = await engine.query('t1', 'main', 'SELECT ?1 AS a, ?2 AS b, ?1 || ?2 AS ab, typeof(?3) AS t, ? AS n', ['x', 'y', 7, null]);
    expect(positional.results[0].rows).toEqual([{ a: 'x', b: 'y', ab: 'xy', t: 'integer', n: null }]);
    const named = await engine.query('t1', 'main', 'SELECT :name AS a, @age AS b, $flag AS c, :real AS d', { name: 'ann', '@age': 31, flag: true, real: 1.5 });
    expect(named.results[0].rows).toEqual([{ a: 'ann', b: 31, c: 1, d: 1.5 }]);
    const filtered = await engine.query('t1', 'main', 'SELECT name FROM users WHERE age >= :min ORDER BY name', { min: 32 });
    expect(filtered.results[0].rows).toEqual([{ name: 'ann' }, { name: 'cy' }]);
  });

  it('refuses params it cannot bind, naming the param', async () => {
    for (const [params, param] of [
      [[{ a: 1 }], 'params.0'],
      [['ok', [1]], 'params.1'],
      [{ x: Number.NaN }, 'params.x'],
      [{ x: Infinity }, 'params.x'],
    ] as const) {
      const err = await engine.query('t1', 'main', 'SELECT ?', params as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SqlParamsError);
      expect((err as SqlParamsError).param).toBe(param);
    }
    await expect(engine.query('t1', 'main', 'SELECT 1', 'x' as never)).rejects.toBeInstanceOf(SqlParamsError);
    await expect(
      engine.query(
        't1',
        'main',
        'SELECT 1',
        Array.from({ length: 101 }, () => 1),
      ),
    ).rejects.toBeInstanceOf(SqlParamsError);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT :a', { a: 1, b: 2 }))).toMatch(/Unknown named parameter 'b'/);
  });

  it('maps values to JSON: BLOB as base64, integers beyond 2^53 as strings, an infinite REAL as null', async () => {
    const { results } = await engine.query(
      't1',
      'main',
      "SELECT x'00ff10' AS b, 9007199254740991 AS safe, 9223372036854775807 AS big, -9007199254740993 AS small, 1e999 AS inf, 2.5 AS r, 'é' AS s, NULL AS z",
    );
    expect(results[0].rows).toEqual([
      { b: 'AP8Q', safe: 9007199254740991, big: '9223372036854775807', small: '-9007199254740993', inf: null, r: 2.5, s: 'é', z: null },
    ]);
  });

  it('answers a syntax error with SQLite’s message', async () => {
    expect(await sqlError(engine.query('t1', 'main', 'SELEC * FROM users'))).toBe('near "SELEC": syntax error');
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM nope'))).toBe('no such table: nope');
    expect(await sqlError(engine.query('t1', 'main', 'INSERT INTO users (name) VALUES (NULL)'))).toBe('NOT NULL constraint failed: users.name');
    expect(await sqlError(engine.query('t1', 'main', ' -- only a comment'))).toMatch(/no statements/);
  });

  it('takes one statement with semicolons in literals, names and comments as one statement', async () => {
    const { results } = await engine.query('t1', 'main', `SELECT 'a;b' AS "x;y", /* ; */ 1 AS n; -- trailing; comment\n ;  `);
    expect(results[0].rows).toEqual([{ 'x;y': 'a;b', n: 1 }]);
  });
});

describe('SQLite engine: scripts', () => {
  it('runs a script in one transaction and counts its changes, trigger bodies and literals with semicolons included', async () => {
    const outcome = await engine.query(
      't1',
      'main',
      `CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
       CREATE TABLE log (n INTEGER);
       CREATE TRIGGER notes_log AFTER INSERT ON notes BEGIN INSERT INTO log VALUES (new.id); END;
       INSERT INTO notes (body) VALUES ('one; two');
       INSERT INTO notes (body) VALUES ('three'), ('four');
       SELECT * FROM notes;`,
    );
    // Three notes and, through the trigger, three log rows.
    expect(outcome).toEqual({ results: [], rowsRead: 0, rowsWritten: 6 });
    const notes = await engine.query('t1', 'main', 'SELECT body FROM notes ORDER BY id');
    expect(notes.results[0].rows.map((r) => r.body)).toEqual(['one; two', 'three', 'four']);
  });

  it('leaves nothing behind when a statement of the script fails', async () => {
    const message = await sqlError(
      engine.query('t1', 'main', 'CREATE TABLE half (a); INSERT INTO half VALUES (1); INSERT INTO users (name) VALUES (NULL); INSERT INTO half VALUES (2)'),
    );
    expect(message).toBe('NOT NULL constraint failed: users.name');
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM half'))).toBe('no such table: half');
    expect(await sqlError(engine.query('t1', 'main', 'CREATE TABLE half (a); SELEC 1'))).toMatch(/syntax error/);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM half'))).toBe('no such table: half');
  });

  it('refuses a script with params before running anything', async () => {
    await expect(engine.query('t1', 'main', 'CREATE TABLE never (a); INSERT INTO never VALUES (?)', [1])).rejects.toBeInstanceOf(ScriptParamsError);
    await expect(engine.query('t1', 'main', 'CREATE TABLE never (a); SELECT :x', { x: 1 })).rejects.toBeInstanceOf(ScriptParamsError);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM never'))).toBe('no such table: never');
  });
});

describe('SQLite engine: read-only queries', () => {
  it('reads but refuses writes, alone or in a script (rolled back), and writes again after', async () => {
    const readOnly = { readOnly: true };
    expect((await engine.query('t1', 'main', 'SELECT count(*) AS n FROM users', undefined, readOnly)).results[0].rows).toEqual([{ n: 3 }]);
    expect((await engine.query('t1', 'main', 'SELECT 1; SELECT 2', undefined, readOnly)).results).toEqual([]);
    const err = await engine.query('t1', 'main', "INSERT INTO users (name) VALUES ('ro')", undefined, readOnly).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqlReadOnlyError);
    expect((err as Error).message).toBe('attempt to write a readonly database');
    await expect(engine.query('t1', 'main', 'SELECT 1; CREATE TABLE ro (a); INSERT INTO ro VALUES (1)', undefined, readOnly)).rejects.toBeInstanceOf(
      SqlReadOnlyError,
    );
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM ro'))).toBe('no such table: ro');
    // Other refusals stay plain SqlErrors.
    const syntax = await engine.query('t1', 'main', 'SELEC', undefined, readOnly).catch((e: unknown) => e);
    expect(syntax).toBeInstanceOf(SqlError);
    expect(syntax).not.toBeInstanceOf(SqlReadOnlyError);
    const write = await engine.query('t1', 'main', "INSERT INTO users (name) VALUES ('rw')");
    expect(write.rowsWritten).toBe(1);
    await engine.query('t1', 'main', "DELETE FROM users WHERE name = 'rw'");
  });
});

describe('SQLite engine: namespaces and tenants', () => {
  it('answers not found for a namespace that was never made, and makes no file for it', async () => {
    await expect(engine.query('t1', 'absent', 'SELECT 1')).rejects.toBeInstanceOf(NamespaceMissingError);
    await expect(engine.query('t9', 'absent', 'SELECT 1')).rejects.toBeInstanceOf(NamespaceMissingError);
    expect(existsSync(path.join(root, 't1', 'absent.db'))).toBe(false);
    expect(existsSync(path.join(root, 't9'))).toBe(false);
  });

  it('keeps two tenants’ namespaces of the same name apart', async () => {
    await engine.createNamespace('t2', 'main');
    await engine.query('t2', 'main', "CREATE TABLE secret (v TEXT); INSERT INTO secret VALUES ('t2 only')");
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM secret'))).toBe('no such table: secret');
    expect((await engine.query('t2', 'main', 'SELECT v FROM secret')).results[0].rows).toEqual([{ v: 't2 only' }]);
    expect(await sqlError(engine.query('t2', 'main', 'SELECT * FROM users'))).toBe('no such table: users');
  });

  it('measures the stored bytes of a tenant’s databases, growing with data', async () => {
    await engine.createNamespace('t3', 'big');
    await engine.query('t3', 'big', 'CREATE TABLE blobs (b BLOB)');
    const before = await engine.storedBytes('t3');
    for (let i = 0; i < 10; i++) await engine.query('t3', 'big', 'INSERT INTO blobs VALUES (randomblob(100000))');
    const after = await engine.storedBytes('t3');
    expect(after - before).toBeGreaterThan(1_000_000);
    expect(await engine.storedBytes('t8')).toBe(0);
  });

  it('drops a namespace with its files, once', async () => {
    await engine.createNamespace('t3', 'gone');
    await engine.query('t3', 'gone', 'CREATE TABLE a (x); INSERT INTO a VALUES (1)');
    expect(readdirSync(path.join(root, 't3')).filter((f) => f.startsWith('gone.'))).toContain('gone.db-wal');
    expect(await engine.dropNamespace('t3', 'gone')).toBe(true);
    expect(readdirSync(path.join(root, 't3')).filter((f) => f.startsWith('gone.'))).toEqual([]);
    expect(await engine.dropNamespace('t3', 'gone')).toBe(false);
    await expect(engine.query('t3', 'gone', 'SELECT 1')).rejects.toBeInstanceOf(NamespaceMissingError);
    // Made again, it starts empty.
    expect(await engine.createNamespace('t3', 'gone')).toBe(true);
    expect(await sqlError(engine.query('t3', 'gone', 'SELECT * FROM a'))).toBe('no such table: a');
  });

  it('drops a tenant with all its namespaces', async () => {
    await engine.createNamespace('t4', 'a');
    await engine.createNamespace('t4', 'b');
    await engine.query('t4', 'a', 'CREATE TABLE x (v)');
    await engine.dropTenant('t4');
    expect(existsSync(path.join(root, 't4'))).toBe(false);
    await expect(engine.query('t4', 'a', 'SELECT 1')).rejects.toBeInstanceOf(NamespaceMissingError);
    expect(await engine.storedBytes('t4')).toBe(0);
  });

  it('refuses tenant and namespace names that could leave the folder or break the rules', async () => {
    for (const bad of ['..', '../t2', 't2/main', 'T1', '', 'a.b', 'a b', '-x', 'x'.repeat(64)]) {
      await expect(engine.createNamespace('t1', bad)).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.query('t1', bad, 'SELECT 1')).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.dropNamespace('t1', bad)).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.query(bad, 'main', 'SELECT 1')).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.createNamespace(bad, 'main')).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.storedBytes(bad)).rejects.toBeInstanceOf(SqlNameError);
      await expect(engine.dropTenant(bad)).rejects.toBeInstanceOf(SqlNameError);
    }
    expect(readdirSync(root).sort()).toEqual(
      readdirSync(root)
        .filter((name) => /^[a-z0-9]{1,32}$/.test(name))
        .sort(),
    );
  });
});

describe('SQLite engine: confinement', () => {
  const otherFile = () => path.join(root, 't2', 'main.db');

  it('refuses ATTACH of another tenant’s file, alone and inside a script', async () => {
    expect(await sqlError(engine.query('t1', 'main', `ATTACH DATABASE '${otherFile()}' AS x`))).toMatch(/^not authorized: ATTACH/);
    expect(await sqlError(engine.query('t1', 'main', `CREATE TABLE before_attach (a); ATTACH '${otherFile()}' AS x; SELECT * FROM x.secret`))).toMatch(
      /not authorized/,
    );
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM before_attach'))).toBe('no such table: before_attach');
    expect(await sqlError(engine.query('t1', 'main', `ATTACH '${path.join(root, 'evil.db')}' AS y`))).toMatch(/not authorized/);
    expect(existsSync(path.join(root, 'evil.db'))).toBe(false);
  });

  it('refuses VACUUM INTO a path outside and creates no file; plain VACUUM is refused too', async () => {
    const outside = path.join(tmpdir(), `sqlite-engine-evil-${process.pid}.db`);
    expect(await sqlError(engine.query('t1', 'main', `VACUUM INTO '${outside}'`))).toMatch(/not authorized/);
    expect(await sqlError(engine.query('t1', 'main', `CREATE TABLE v (a); VACUUM INTO '${outside}'`))).toMatch(/not authorized|cannot VACUUM/);
    expect(existsSync(outside)).toBe(false);
    expect(await sqlError(engine.query('t1', 'main', 'VACUUM'))).toMatch(/not authorized: VACUUM is not available/);
  });

  it('refuses PRAGMAs that change the file or the connection, and keeps the file in WAL mode', async () => {
    expect(await sqlError(engine.query('t1', 'main', 'PRAGMA writable_schema = ON'))).toMatch(/not authorized: PRAGMA writable_schema/);
    expect(await sqlError(engine.query('t1', 'main', 'PRAGMA journal_mode = DELETE'))).toMatch(/not authorized: PRAGMA journal_mode/);
    expect(await sqlError(engine.query('t1', 'main', 'PRAGMA foreign_keys = OFF'))).toMatch(/can be read but not set/);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM pragma_journal_mode'))).toMatch(/not authorized/);
    // The header's read and write versions are 2 in WAL mode.
    const header = readFileSync(path.join(root, 't1', 'main.db')).subarray(18, 20);
    expect([...header]).toEqual([2, 2]);
    // The schema ones answer.
    const info = await engine.query('t1', 'main', 'PRAGMA table_info(users)');
    expect(info.results[0].rows.map((r) => r.name)).toEqual(['id', 'name', 'age']);
    expect((await engine.query('t1', 'main', 'PRAGMA foreign_keys')).results[0].rows).toEqual([{ foreign_keys: 1 }]);
  });

  it('refuses load_extension and the file functions', async () => {
    expect(await sqlError(engine.query('t1', 'main', "SELECT load_extension('/tmp/x.so')"))).toMatch(/not authorized/);
    expect(await sqlError(engine.query('t1', 'main', "SELECT readfile('/etc/passwd')"))).toMatch(/no such function|not authorized/);
  });

  it('refuses transaction statements, which would outlive the request', async () => {
    expect(await sqlError(engine.query('t1', 'main', 'BEGIN'))).toMatch(/not authorized: BEGIN, COMMIT/);
    expect(await sqlError(engine.query('t1', 'main', 'SAVEPOINT s'))).toMatch(/not authorized/);
    // A script cannot commit its transaction half-way and leave the rest outside it.
    expect(await sqlError(engine.query('t1', 'main', 'CREATE TABLE c1 (a); COMMIT; CREATE TABLE c2 (a); SELEC'))).toMatch(/not authorized/);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT * FROM c1'))).toBe('no such table: c1');
  });
});

describe('SQLite engine: limits', () => {
  it('refuses an answer beyond the row or byte caps with a clear message', async () => {
    const rows = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ?) SELECT x FROM c';
    expect((await engine.query('t1', 'main', rows, [100])).rowsRead).toBe(100);
    expect(await sqlError(engine.query('t1', 'main', rows, [101]))).toBe(
      'the result has more than 100 rows and was not returned: ask for fewer (LIMIT, OFFSET)',
    );
    expect(await sqlError(engine.query('t1', 'main', 'SELECT hex(randomblob(20000)) AS a, hex(randomblob(20000)) AS b'))).toMatch(/larger than 65536 bytes/);
  });

  it('refuses a value beyond 2 MB and SQL beyond its size', async () => {
    expect(await sqlError(engine.query('t1', 'main', 'SELECT length(randomblob(3000000))'))).toBe('string or blob too big');
    expect(await sqlError(engine.query('t1', 'main', `SELECT '${'x'.repeat(1024 * 1024)}'`))).toMatch(/longer than 1048576 bytes/);
    expect(await sqlError(engine.query('t1', 'main', 'SELECT 1\0; DROP TABLE users'))).toMatch(/NUL/);
  });

  it('closes the least recently used databases beyond its bound and reopens them on demand', async () => {
    const small = new SqliteEngine({ rootDir: root, workers: 1, maxOpenPerWorker: 1 });
    try {
      await small.createNamespace('t5', 'one');
      await small.createNamespace('t5', 'two');
      await small.query('t5', 'one', "CREATE TABLE a (v); INSERT INTO a VALUES ('one')");
      expect(existsSync(path.join(root, 't5', 'one.db-wal'))).toBe(true);
      await small.query('t5', 'two', 'SELECT 1');
      // Closing the last connection checkpoints the WAL and removes it.
      expect(existsSync(path.join(root, 't5', 'one.db-wal'))).toBe(false);
      expect((await small.query('t5', 'one', 'SELECT v FROM a')).results[0].rows).toEqual([{ v: 'one' }]);
    } finally {
      await small.close();
    }
    await expect(small.query('t5', 'one', 'SELECT 1')).rejects.toBeInstanceOf(BackendUnavailableError);
  });
});

describe('SQLite engine: time limit', () => {
  const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
  let timed: SqliteEngine;
  beforeAll(() => {
    timed = new SqliteEngine({ rootDir: root, workers: 2, queryTimeoutMs: 300 });
  });
  afterAll(() => timed?.close());

  it('stops a runaway query, answers another worker’s tenant meanwhile, and the database works after', async () => {
    const slow = 't6';
    const other = tenantOnOtherWorker(slow);
    await timed.createNamespace(slow, 'main');
    await timed.createNamespace(other, 'main');
    await timed.query(slow, 'main', "CREATE TABLE kept (v); INSERT INTO kept VALUES ('before')");

    const started = Date.now();
    let stoppedAt = Infinity;
    const runaway = timed.query(slow, 'main', RUNAWAY).catch((e: unknown) => {
      stoppedAt = Date.now();
      return e;
    });
    // Queued behind the runaway in the same worker: answered by the fresh one.
    const queued = timed.query(slow, 'main', 'SELECT v FROM kept');
    await new Promise((resolve) => setTimeout(resolve, 50));
    const before = Date.now();
    expect((await timed.query(other, 'main', 'SELECT 42 AS n')).results[0].rows).toEqual([{ n: 42 }]);
    const answeredAt = Date.now();
    // Promptly: while the runaway still held its worker (a few ms when the machine is idle).
    expect(answeredAt).toBeLessThan(stoppedAt);
    expect(answeredAt - before).toBeLessThan(250);

    const err = await runaway;
    expect(err).toBeInstanceOf(SqlError);
    expect((err as Error).message).toBe('the query ran longer than 300 ms and was stopped');
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect((await queued).results[0].rows).toEqual([{ v: 'before' }]);
    expect((await timed.query(slow, 'main', 'SELECT v FROM kept')).results[0].rows).toEqual([{ v: 'before' }]);
  });

  it('rolls back the writes of a script stopped half-way', async () => {
    const err = await timed.query('t6', 'main', `INSERT INTO kept VALUES ('during'); ${RUNAWAY};`).catch((e: unknown) => e);
    expect((err as Error).message).toBe('the query ran longer than 300 ms and was stopped');
    expect((await timed.query('t6', 'main', 'SELECT v FROM kept')).results[0].rows).toEqual([{ v: 'before' }]);
    expect((await timed.query('t6', 'main', "INSERT INTO kept VALUES ('after')")).rowsWritten).toBe(1);
  });
});
