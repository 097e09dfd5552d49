import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { LocalServerError } from './errors';

/** Directories a server binary is looked for in, beside PATH (Debian keeps daemons in sbin, off most users' PATH). */
const SBIN = ['/usr/sbin', '/usr/local/sbin', '/sbin'];

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The first of `names` found on PATH or in the sbin directories, as an absolute path; null when none is. */
export function findBinary(...names: string[]): string | null {
  const dirs = [...(process.env.PATH ?? '').split(':').filter(Boolean), ...SBIN];
  for (const name of names) {
    if (path.isAbsolute(name)) {
      if (executable(name)) return name;
      continue;
    }
    for (const dir of dirs) if (executable(path.join(dir, name))) return path.join(dir, name);
  }
  return null;
}

/**
 * The install check every server makes before it touches its data: the binary (an absolute path, or
 * a name looked up like `findBinary`), else an error naming what is missing and the install script
 * that brings it (`scripts/install/<script>`).
 */
export function requireBinary(binary: string | string[], install: { what: string; script: string }): string {
  const names = Array.isArray(binary) ? binary : [binary];
  const found = findBinary(...names);
  if (found) return found;
  throw new LocalServerError(`${names.join(' or ')} is missing: ${install.what} is not installed`, `run bash ${install.script} (as root)`);
}

/** The same check for a data file a package installs (a schema, a share directory). */
export function requireFile(file: string, install: { what: string; script: string }): string {
  try {
    accessSync(file, constants.R_OK);
    return file;
  } catch {
    throw new LocalServerError(`${file} is missing: ${install.what} is not installed`, `run bash ${install.script} (as root)`);
  }
}
