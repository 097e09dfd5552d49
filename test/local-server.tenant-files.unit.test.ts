import { execFileSync, spawn } from 'node:child_process';
import { existsSync, linkSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openTenantFile, processAlive, readPidFile, readTenantFile, spawnDetached, tailLines, TenantFileError } from '../providers/local-server';

/**
 * Files in a directory a tenant's server writes, opened by the control plane (root): a planted link,
 * FIFO or hard link is refused at once, never followed and never waited on.
 */
describe('tenant files', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'cloud-tenant-files-'));
  const secret = path.join(dir, 'someone-elses-secret');
  writeFileSync(secret, "the other tenant's data\n");
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const planted = (name: string, kind: 'symlink' | 'fifo' | 'hardlink') => {
    const file = path.join(dir, name);
    if (kind === 'symlink') symlinkSync(secret, file);
    if (kind === 'hardlink') linkSync(secret, file);
    if (kind === 'fifo') execFileSync('mkfifo', [file]);
    return file;
  };

  it('reads a plain file, capped', async () => {
    const file = path.join(dir, 'plain.log');
    writeFileSync(file, 'x'.repeat(100));
    expect(await readTenantFile(file, 10)).toBe('x'.repeat(10));
    expect((await tailLines(file, () => true)).lines).toEqual(['x'.repeat(100)]);
  });

  it.each(['symlink', 'fifo', 'hardlink'] as const)('refuses a %s to read, for logs and pidfiles too, without blocking', async (kind) => {
    const file = planted(`read-${kind}`, kind);
    await expect(readTenantFile(file)).rejects.toBeInstanceOf(TenantFileError);
    await expect(tailLines(file, () => true)).rejects.toBeInstanceOf(TenantFileError);
    expect(await readPidFile(file)).toBeNull();
  });

  it.each(['symlink', 'fifo', 'hardlink'] as const)('refuses a %s as a server`s output file: root never opens another file for it', async (kind) => {
    const file = planted(`out-${kind}`, kind);
    await expect(openTenantFile(file, 'append')).rejects.toBeInstanceOf(TenantFileError);
    await expect(spawnDetached('/bin/true', [], { outputFile: file })).rejects.toBeInstanceOf(TenantFileError);
    expect(readFileSync(secret, 'utf8')).toBe("the other tenant's data\n");
  });

  it('creates a missing output file and appends to it', async () => {
    const file = path.join(dir, 'fresh.out');
    const pid = await spawnDetached('/bin/echo', ['hello'], { outputFile: file });
    expect(pid).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(existsSync(file) && readFileSync(file, 'utf8')).toBe('hello\n');
  });

  it('counts a pid as a server only when it runs as the expected account', async () => {
    const child = spawn('/bin/sleep', ['30']);
    try {
      const pid = child.pid!;
      const uid = process.getuid!();
      expect(await processAlive(pid, 'sleep', { uid })).toBe(true);
      expect(await processAlive(pid, 'sleep', { uid: uid + 4242 })).toBe(false);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
