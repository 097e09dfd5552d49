import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { accountNameFor, ensureAccount, isolatedAccounts, lookupAccount, reapOrphanedAccounts, removeAccount } from '../providers/os-accounts';

/** The per-tenant OS accounts (providers/os-accounts.ts), on this machine's real account database (root only). */
describe.runIf(isolatedAccounts())('OS accounts of tenant servers', () => {
  it('derives distinct, valid names for equal resource names under different roots', () => {
    const a = accountNameFor('db', '/srv/one', 'pg-1');
    const b = accountNameFor('db', '/srv/two', 'pg-1');
    expect(a).not.toBe(b);
    expect(a).toMatch(/^cdb-pg-1-[0-9a-f]{6}$/);
    expect(accountNameFor('lb', '/x', 'a'.repeat(80)).length).toBeLessThanOrEqual(32);
  });

  it('makes one account for parallel calls, takes over a group left behind, and never removes a name it did not make', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'cloud-acct-'));
    const name = accountNameFor('db', dir, 'parallel');
    try {
      const made = await Promise.all([1, 2, 3].map(() => ensureAccount(name, { purpose: 'test', dataDir: dir })));
      expect(new Set(made.map((a) => a.uid)).size).toBe(1);
      expect(await lookupAccount(name)).toEqual(made[0]);
      // A group left without its user (a removal cut short between userdel and groupdel).
      execFileSync('userdel', [name]);
      execFileSync('groupadd', ['--system', name]);
      const again = await ensureAccount(name, { purpose: 'test', dataDir: dir });
      expect(again.name).toBe(name);
      await removeAccount('root');
      await removeAccount('postgres');
      expect(await lookupAccount('root')).not.toBeNull();
    } finally {
      await removeAccount(name);
      rmSync(dir, { recursive: true, force: true });
    }
    expect(await lookupAccount(name)).toBeNull();
  });

  it('removes what the account left in the shared writable directories, so a reused uid inherits nothing', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'cloud-acct-'));
    const name = accountNameFor('db', dir, 'leftovers');
    const left = [path.join('/dev/shm', `PostgreSQL.${process.pid}`), path.join(tmpdir(), `cloud-left-${process.pid}`)];
    try {
      await ensureAccount(name, { purpose: 'test', dataDir: dir });
      for (const file of left) execFileSync('runuser', ['-u', name, '--', 'touch', file]);
      await removeAccount(name);
      for (const file of left) expect(existsSync(file)).toBe(false);
    } finally {
      for (const file of left) rmSync(file, { force: true });
      await removeAccount(name);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reaps the accounts whose data directory is gone, and only those', async () => {
    const kept = mkdtempSync(path.join(tmpdir(), 'cloud-acct-'));
    const gone = mkdtempSync(path.join(tmpdir(), 'cloud-acct-'));
    const keptName = accountNameFor('lb', kept, 'kept');
    const goneName = accountNameFor('lb', gone, 'gone');
    try {
      await ensureAccount(keptName, { purpose: 'test', dataDir: kept });
      await ensureAccount(goneName, { purpose: 'test', dataDir: gone });
      rmSync(gone, { recursive: true, force: true });
      const reaped = await reapOrphanedAccounts();
      expect(reaped).toContain(goneName);
      expect(reaped).not.toContain(keptName);
      expect(await lookupAccount(goneName)).toBeNull();
      expect(await lookupAccount(keptName)).not.toBeNull();
    } finally {
      await removeAccount(keptName);
      await removeAccount(goneName);
      rmSync(kept, { recursive: true, force: true });
    }
  });
});
