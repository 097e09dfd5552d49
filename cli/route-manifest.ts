import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import type { AnyRoute } from '../api/route';
import type { ClientRoute } from '../client/client-routes';

/**
 * The routes the CLI is generated from. Loading the route table means loading the server's code
 * (Temporal client, knex, objection: over a second), so the CLI keeps the table's client view
 * (plain JSON) in `$XDG_CACHE_HOME/cloud/`, keyed by the size and modification time of every source
 * file of this package: any change to a route, a schema or anything they import makes a new key.
 */
const ROOT = path.resolve(__dirname, '..');
const SOURCE_DIRS = ['api', 'domain', 'families', 'providers', 'common', 'db', 'workflows', 'activities', 'client', 'cli', 'mcp'];

function sourceFingerprint(): string {
  const hash = createHash('sha256');
  const visit = (dir: string) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) visit(full);
      else if (/\.(ts|json)$/.test(entry.name)) {
        const st = statSync(full);
        hash.update(`${path.relative(ROOT, full)}:${st.size}:${st.mtimeMs}\n`);
      }
    }
  };
  for (const dir of SOURCE_DIRS) visit(path.join(ROOT, dir));
  hash.update(readFileSync(path.join(ROOT, 'package.json')));
  // Another zod (or other dependency) can render the schemas differently.
  try {
    const lock = statSync(path.join(ROOT, 'package-lock.json'));
    hash.update(`package-lock.json:${lock.size}:${lock.mtimeMs}\n`);
  } catch {
    // Installed from a tarball: no lockfile; package.json and the version cover it.
  }
  return hash.digest('hex').slice(0, 20);
}

function cacheDir(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CACHE_HOME && path.isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : path.join(homedir(), '.cache');
  return path.join(base, 'cloud');
}

/** The client view of the route table, built from `buildRouteTable` (so every family is in it). */
export function buildClientRoutes(): ClientRoute[] {
  // Required here, not imported at the top: only a cache miss should pay for the server's code.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { buildRouteTable } = require('../api/routes') as typeof import('../api/routes');
  const { clientRoutes } = require('../client/from-route-table') as typeof import('../client/from-route-table');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const table: AnyRoute[] = buildRouteTable({ devEndpoints: false });
  return clientRoutes(table);
}

export function loadClientRoutes(env: NodeJS.ProcessEnv = process.env): ClientRoute[] {
  const dir = cacheDir(env);
  const name = `routes-${sourceFingerprint()}.json`;
  const file = path.join(dir, name);
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as ClientRoute[];
  } catch {
    // Not cached yet (or unreadable): build it below.
  }
  const routes = buildClientRoutes();
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(routes));
    renameSync(tmp, file);
    for (const old of readdirSync(dir)) if (/^routes-[0-9a-f]+\.json$/.test(old) && old !== name) rmSync(path.join(dir, old), { force: true });
  } catch {
    // A read-only home: the CLI still works, it only starts slower.
  }
  return routes;
}
