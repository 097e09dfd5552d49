/**
 * Data directories of local servers. A server runs as an account of its own (providers/os-accounts.ts),
 * so its data must lie where that account can pass through every directory above it: a checkout in a
 * home that others cannot enter (mode 0700, as root's and Debian 12's homes are) is not such a place.
 * `serverDataRoot` picks the place, `ensureReachable` checks it with an error naming the directory,
 * the account and the fix, and `makeDirectory` creates directories without closing the way for the
 * servers below them.
 */
import { createHash } from 'node:crypto';
import { promises as fs, statSync } from 'node:fs';
import path from 'node:path';
import type { OsAccount } from '../os-accounts';
import { LocalServerError } from './errors';
import { runningAsRoot } from './process';

/** Where server data goes when the checkout's own `.data` cannot be reached: one directory per checkout. */
export const MACHINE_DATA_BASE = '/var/lib/cloud-dev';

/** Mode of directories made above a server's own: passable by every account, listable by none. */
const PASSABLE = 0o711;

const ownerName = (uid: number) => (uid === 0 ? 'root' : `uid ${uid}`);

/**
 * The first directory on the way to `dir` (itself included) that `account` may not pass through,
 * with its mode and owner; null when the whole way is open. Directories that do not exist yet end
 * the walk (they are made passable by `makeDirectory`).
 */
export function traversalBlocker(dir: string, account: Pick<OsAccount, 'uid' | 'gid'> | 'others'): { dir: string; mode: number; uid: number } | null {
  if (account !== 'others' && account.uid === 0) return null;
  const parts = path.resolve(dir).split(path.sep).filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
    const current = `/${parts.slice(0, i).join('/')}`;
    let st;
    try {
      st = statSync(current);
    } catch {
      return null;
    }
    const mode = st.mode & 0o7777;
    const bit = account === 'others' ? 0o001 : st.uid === account.uid ? 0o100 : st.gid === account.gid ? 0o010 : 0o001;
    if (!(mode & bit)) return { dir: current, mode, uid: st.uid };
  }
  return null;
}

/**
 * Fails, naming the cause and the fix, unless `account` can pass through every directory down to
 * `dir`. Called before a server (or its initdb) first touches its data: what the server itself
 * would print is some unrelated line about a file it could not open.
 */
export function ensureReachable(dir: string, account: OsAccount, what: { server: string; setting?: string }): void {
  const blocker = traversalBlocker(dir, account);
  if (!blocker) return;
  const mode = blocker.mode.toString(8).padStart(4, '0');
  throw new LocalServerError(
    `${what.server} runs as account ${account.name}, which cannot enter ${blocker.dir} (mode ${mode}, owner ${ownerName(blocker.uid)}), so its data directory ${dir} is out of its reach`,
    [
      what.setting
        ? `set ${what.setting} to a directory every account can pass through (left unset, a checkout whose .data others cannot reach keeps server data under ${MACHINE_DATA_BASE}/)`
        : null,
      `or let other accounts pass with chmod o+x ${blocker.dir}`,
      'or move the checkout out of it',
    ]
      .filter(Boolean)
      .join(', '),
  );
}

/**
 * Where a checkout's servers keep their data when nothing is configured: `<checkout>/.data`, unless
 * this process is root (servers then run as accounts of their own) and other accounts cannot pass
 * through the way to it; then `/var/lib/cloud-dev/<hash of the checkout's path>/`, one per checkout.
 */
export function serverDataRoot(checkout: string, base = MACHINE_DATA_BASE): string {
  const local = path.join(path.resolve(checkout), '.data');
  if (!runningAsRoot() || !traversalBlocker(local, 'others')) return local;
  return path.join(base, checkoutHash(checkout));
}

/** A short, stable name for a checkout (its absolute path hashed): the machine directory's and the local run's ranges. */
export function checkoutHash(checkout: string): string {
  return createHash('sha256').update(path.resolve(checkout)).digest('hex').slice(0, 12);
}

/**
 * Creates `dir` with `mode` (and sets it when it exists); missing directories above it are made
 * passable (0711) rather than `dir`'s mode, so a 0700 server directory never closes the way to its
 * neighbours' (a recursive mkdir gives every level the same mode).
 */
export async function makeDirectory(dir: string, mode: number): Promise<void> {
  const target = path.resolve(dir);
  const missing: string[] = [];
  for (let current = target; ; current = path.dirname(current)) {
    const found = await fs.stat(current).then(
      () => true,
      () => false,
    );
    if (found) break;
    missing.unshift(current);
    if (path.dirname(current) === current) break;
  }
  for (const d of missing) {
    await fs.mkdir(d, { mode: d === target ? mode : PASSABLE }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    if (d !== target) await fs.chmod(d, PASSABLE);
  }
  await fs.chmod(target, mode);
}

/**
 * Gives `dir` and everything in it to `account`. Never follows a symbolic link (lchown, and a link
 * to a directory is not descended into): root must not hand a file outside the tree to a server.
 */
export async function chownTree(dir: string, account: OsAccount): Promise<void> {
  if (!runningAsRoot()) return;
  await fs.lchown(dir, account.uid, account.gid);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(p, account);
    else await fs.lchown(p, account.uid, account.gid);
  }
}

/** Creates `dir` (mode 0700) for `account` alone: owned by it when this process is root. */
export async function ownedDirectory(dir: string, account: OsAccount): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
  if (runningAsRoot()) await fs.lchown(dir, account.uid, account.gid);
}
