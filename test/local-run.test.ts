import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyPassword } from '../common/crypto';
import { seedCore } from '../db/seeds/core.seed';
import { createTestDatabase, type TestDatabase } from './helpers/db';

/**
 * `npm start`: the banner never lies about the demo passwords (a database seeded before, by another
 * checkout or with other DEMO_*_PASSWORD values, gets the printed ones), and the PostgreSQL setup
 * runs its postgres commands from `/` (no "could not change directory" noise).
 */
const root = path.resolve(__dirname, '..');
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database?.drop());

describe('the local run', () => {
  it('resets demo users to the passwords it prints when the database was seeded with others', async () => {
    const first = await seedCore(database.db, { owner: 'first owner password', dev: 'the developer password', other: 'the other owner password' });
    expect(first).toEqual({ createdUsers: true, resetPasswords: [] });
    const second = await seedCore(database.db, { owner: 'another owner password', dev: 'the developer password', other: 'the other owner password' });
    expect(second).toEqual({ createdUsers: false, resetPasswords: ['owner@example.test'] });
    const hashOf = async (email: string) => (await database.db('users').where({ email }).first()).password_hash;
    expect(await verifyPassword('another owner password', await hashOf('owner@example.test'))).toBe(true);
    expect(await verifyPassword('the developer password', await hashOf('dev@example.test'))).toBe(true);
    expect(await seedCore(database.db, { owner: 'another owner password', dev: 'the developer password', other: 'the other owner password' })).toEqual({
      createdUsers: false,
      resetPasswords: [],
    });
  });

  // The machine's own cluster (not an external DATABASE_URL server), set up as root.
  it.skipIf(Boolean(process.env.DATABASE_URL) || process.getuid?.() !== 0)("runs postgres's commands from / during setup", () => {
    const bin = mkdtempSync(path.join(tmpdir(), 'cloud-runuser-'));
    try {
      const log = path.join(bin, 'cwd.log');
      const real = execFileSync('bash', ['-c', 'command -v runuser']).toString().trim();
      writeFileSync(path.join(bin, 'runuser'), `#!/bin/bash\npwd >> "${log}"\nexec ${real} "$@"\n`);
      chmodSync(path.join(bin, 'runuser'), 0o755);
      const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}:${process.env.PATH}` };
      delete env.DATABASE_URL;
      const out = execFileSync('bash', ['scripts/install/postgresql.sh'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
      expect(out).not.toContain('could not change directory');
      const dirs = readFileSync(log, 'utf8').trim().split('\n');
      expect(dirs.length).toBeGreaterThan(0);
      expect(new Set(dirs)).toEqual(new Set(['/']));
      expect(readFileSync(path.join(root, 'scripts/ensure-tools.sh'), 'utf8')).toContain('bash scripts/install/postgresql.sh');
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });
});
