/**
 * One operating-system account per tenant server. Each server a customer's resource runs on this
 * machine (a database instance, a load balancer's HAProxy) runs as an account of its own, created
 * with the resource and removed with it, so that a customer who gets code running inside their own
 * server (a database's `COPY ... FROM PROGRAM`, a HAProxy bug) meets file modes and signal rules
 * between it and every other tenant's server, not one shared uid.
 *
 * Accounts are system accounts without a home or a login shell. Names are derived from the
 * resource's name and the directory its data lives in, so two checkouts (or two test files) on one
 * machine that both make a resource called `pg-1` get two accounts, and an operator reading `ps`
 * still sees which resource a process serves (`cdb-pg-1-3f9a1c`).
 *
 * Without root (a developer's unprivileged checkout) no account can be made: every server then runs
 * as this process's own account, as the local stand-in always did, and `isolatedAccounts()` says so.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface OsAccount {
  name: string;
  uid: number;
  gid: number;
}

/** Linux limits user names to 32 characters; useradd wants them to start with a letter or `_`. */
const MAX_NAME = 32;
const NAME_PATTERN = /^[a-z_][a-z0-9_-]{0,31}$/;
/** Readable part of a derived name: enough to recognise the resource in `ps` and the Temporal UI's activity errors. */
const READABLE = 16;
/** What `accountNameFor` makes, and all `removeAccount` and `reapOrphanedAccounts` ever touch. */
const DERIVED_NAME = /^c(db|lb|dns|s3|wp)-[a-z0-9-]*[0-9a-f]{6}$/;

export type AccountKind = 'db' | 'lb' | 'dns' | 's3' | 'wp';

/** Whether servers get accounts of their own here (only root can create accounts). */
export const isolatedAccounts = (): boolean => process.getuid?.() === 0;

/** This process's own account. */
export function processAccount(): OsAccount {
  const info = os.userInfo();
  return { name: info.username, uid: info.uid, gid: info.gid };
}

/**
 * The account name for resource `name` of `kind` whose data lives under `root`: `c<kind>-<name>-<hash>`,
 * the hash over both so that equal names under different roots never share an account.
 */
export function accountNameFor(kind: AccountKind, root: string, name: string): string {
  const hash = createHash('sha256').update(`${kind}\0${root}\0${name}`).digest('hex').slice(0, 6);
  const readable = name
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, READABLE)
    .replace(/-+$/, '');
  const result = `c${kind}-${readable ? `${readable}-` : ''}${hash}`;
  if (result.length > MAX_NAME || !NAME_PATTERN.test(result)) throw new Error(`cannot derive an account name for ${kind} ${name}`);
  return result;
}

function exec(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: 60_000, env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LC_ALL: 'C' } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code as number) : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/**
 * Serialises this module's account changes across processes on the machine (flock on a shared
 * file). In /run, which only root writes (accounts are only made as root): in a world-writable
 * directory a tenant's process could hold the lock and stop every account change.
 */
const LOCK_FILE = path.join(existsSync('/run') ? '/run' : os.tmpdir(), 'cloud-os-accounts.lock');
const locked = (command: string, args: string[]) => exec('flock', ['--wait', '60', LOCK_FILE, command, ...args]);

async function lookupGroup(name: string): Promise<boolean> {
  return (await exec('getent', ['group', name])).code === 0;
}

const COMMENT_PREFIX = 'cloud ';
const DATA_MARK = ' @ ';
/** The passwd comment (GECOS) of an account: no `:` or newline, which would break the file's lines. */
function accountComment(owner: { purpose: string; dataDir: string }): string {
  return `${COMMENT_PREFIX}${owner.purpose}${DATA_MARK}${owner.dataDir}`.replace(/[:\n]/g, ' ').slice(0, 250);
}

/** The account called `name`, or null when the machine has none. */
export async function lookupAccount(name: string): Promise<OsAccount | null> {
  if (!NAME_PATTERN.test(name)) return null;
  const { code, stdout } = await exec('getent', ['passwd', name]);
  if (code !== 0) return null;
  const [, , uid, gid] = stdout.trim().split(':');
  return { name, uid: Number(uid), gid: Number(gid) };
}

/**
 * The account called `name`, created when missing (a system account with a group of its own, no
 * home, no shell). Its comment names what it serves and the directory its data lives in
 * (`cloud DBaaS instance pg-1 @ /var/lib/cloud/dbaas`), which is how `reapOrphanedAccounts` knows an
 * account whose data is gone. Without root: this process's account. Safe to call from several
 * processes at once: a creation that lost the race finds the winner's account.
 */
export async function ensureAccount(name: string, owner: { purpose: string; dataDir: string }): Promise<OsAccount> {
  if (!isolatedAccounts()) return processAccount();
  if (!NAME_PATTERN.test(name)) throw new Error(`invalid account name "${name}"`);
  const existing = await lookupAccount(name);
  if (existing) return existing;
  // A group left behind by an account removed half way is taken over rather than failing useradd.
  const group = (await lookupGroup(name)) ? ['--gid', name] : ['--user-group'];
  const args = ['--system', ...group, '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin'];
  args.push('--comment', accountComment(owner), name);
  // useradd gives up at once when another useradd/userdel holds /etc/passwd's lock, and two of
  // ours for one name (the API and the worker) can interleave: ours run one at a time on this
  // machine, and a failure (someone else's lock) is tried again before it is reported.
  let last = { code: 0, stdout: '', stderr: '' };
  for (let attempt = 0; attempt < 8; attempt++) {
    last = await locked('useradd', args);
    const account = await lookupAccount(name);
    if (account) {
      // useradd hands a freed uid out again: nothing a former holder left keyed by it may apply to this one.
      await releaseUid(account.uid);
      return account;
    }
    await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
  }
  throw new Error(`useradd ${name} failed (${last.code}): ${last.stderr.trim() || last.stdout.trim() || 'no output'}`);
}

/**
 * Removes the account and its group (after its processes are gone). Missing is fine; without root
 * there is nothing to remove. Refuses names this module would never have made, so a bad record
 * can never remove `root` or `postgres`.
 */
export async function removeAccount(name: string): Promise<void> {
  if (!isolatedAccounts() || !DERIVED_NAME.test(name)) return;
  const account = await lookupAccount(name);
  if (!account) return;
  await exec('pkill', ['-KILL', '-u', name]);
  await releaseUid(account.uid);
  await removeLeftovers(name);
  // 8: still logged in (a process outlived its server's stop): kill what is left first. Any other
  // failure is most often /etc/passwd's lock held by a parallel useradd/userdel: try again.
  for (let attempt = 0; attempt < 8 && (await lookupAccount(name)); attempt++) {
    const removed = await locked('userdel', [name]);
    if (removed.code === 8) await exec('pkill', ['-KILL', '-u', name]);
    if (removed.code !== 0) await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
  }
  if (await lookupGroup(name)) await locked('groupdel', [name]);
}

/**
 * Forgets what the host keeps keyed by a uid rather than by a name: a hosted site's firewall rules
 * (`-m owner --uid-owner`, providers/wordpress/egress.ts). Called when an account goes and when a
 * new one gets a uid: rules a removed account left (its site's directory deleted without a destroy)
 * must never apply to the next account that gets its uid. Loaded on use (that module reads accounts).
 */
async function releaseUid(uid: number): Promise<void> {
  const { removeSiteEgress } = await import('./wordpress/egress');
  await removeSiteEgress(uid).catch(() => undefined);
}

/** Directories every account may write to, outside any resource's own directory. */
const SHARED_WRITABLE = ['/tmp', '/var/tmp', '/dev/shm', '/dev/mqueue', '/run/lock'];

/**
 * What an account leaves outside its resource's directory: files in the world-writable
 * directories (a PostgreSQL server's shared memory segments in /dev/shm after a kill, whatever code
 * running as the account put in /tmp) and System V IPC objects. `useradd --system` hands a freed
 * uid out again, and the next tenant's account must not inherit any of it (data, or a planted
 * setuid file).
 */
async function removeLeftovers(name: string): Promise<void> {
  const dirs = SHARED_WRITABLE.filter((d) => existsSync(d));
  if (dirs.length) await exec('find', [...dirs, '-xdev', '-user', name, '-delete']);
  for (const [kind, flag] of [
    ['-m', '-m'],
    ['-s', '-s'],
    ['-q', '-q'],
  ] as const) {
    const { stdout } = await exec('ipcs', [kind]);
    for (const line of stdout.split('\n')) {
      // key  id  owner  perms ...
      const [, id, owner] = line.trim().split(/\s+/);
      if (owner === name && /^\d+$/.test(id ?? '')) await exec('ipcrm', [flag, id]);
    }
  }
}

/**
 * Removes the accounts this module made whose data directory no longer exists: what a server left
 * when its resource's directory was deleted without a destroy (a test run killed half way, a
 * temporary directory cleaned up). Their processes are killed first. System accounts are a small
 * range (about 900 ids shared with the machine's packages), so leaks must not pile up over runs.
 * Returns the names removed.
 */
export async function reapOrphanedAccounts(): Promise<string[]> {
  if (!isolatedAccounts()) return [];
  const { code, stdout } = await exec('getent', ['passwd']);
  if (code !== 0) return [];
  const removed: string[] = [];
  for (const line of stdout.split('\n')) {
    const [name, , , , comment = ''] = line.split(':');
    if (!name || !DERIVED_NAME.test(name) || !comment.startsWith(COMMENT_PREFIX)) continue;
    const at = comment.lastIndexOf(DATA_MARK);
    const dataDir = at === -1 ? '' : comment.slice(at + DATA_MARK.length);
    if (!path.isAbsolute(dataDir) || existsSync(dataDir)) continue;
    await exec('pkill', ['-KILL', '-u', name]);
    await removeAccount(name);
    removed.push(name);
  }
  return removed;
}
