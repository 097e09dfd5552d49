/**
 * What an app's build runs (DECISIONS "CaaS": a root `Containerfile`, else `package.json`), and the
 * checks on a customer's Containerfile before podman sees it.
 *
 * A Containerfile may only start from the platform's own images: no registry is reachable, and
 * every other local image is some tenant's app, whose files (and whatever secrets were built into
 * them) another tenant must not read. The same goes for `COPY --from=<image>` and
 * `RUN --mount=...,from=<image>`, which read an image without building on it. References through
 * build arguments (`FROM $BASE`) cannot be checked before the build and are refused.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { APP_UID, BASE_IMAGE, MINBASE_IMAGE } from './base-image';

/** The images a Containerfile may name, in the spellings podman resolves to them locally. */
const ALLOWED_BASES = new Set(
  [BASE_IMAGE, MINBASE_IMAGE].flatMap((ref) => {
    const short = ref.replace(/^localhost\//, '');
    const untagged = (r: string) => (r.endsWith(':latest') ? [r, r.slice(0, -':latest'.length)] : [r]);
    return [...untagged(ref), ...untagged(short)];
  }),
);

export interface PackageJson {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  scripts?: Record<string, string>;
}

/** Why a build cannot start, written for the customer (it goes into the build log). */
export class BuildRefusal extends Error {}

/** The logical lines of a Containerfile: continuations joined, comments and blank lines left out. */
export function containerfileInstructions(text: string): string[] {
  const escape = /^#\s*escape\s*=\s*`/im.test(text.split('\n').slice(0, 5).join('\n')) ? '`' : '\\';
  const instructions: string[] = [];
  let current = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith('#') || (line === '' && current === '')) continue;
    if (line.endsWith(escape)) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    current += line;
    if (current.trim()) instructions.push(current.trim());
    current = '';
  }
  if (current.trim()) instructions.push(current.trim());
  return instructions;
}

/** The image references of one instruction that read another image: FROM's, COPY/ADD's --from, RUN --mount's from. */
function referencesOf(keyword: string, args: string[]): string[] {
  if (keyword === 'FROM') return args.filter((a) => !a.startsWith('--')).slice(0, 1);
  const flags = args.filter((a) => a.startsWith('--'));
  if (keyword === 'COPY' || keyword === 'ADD') return flags.filter((f) => /^--from=/i.test(f)).map((f) => f.slice('--from='.length));
  if (keyword === 'RUN')
    return flags
      .filter((f) => /^--mount=/i.test(f))
      .flatMap((f) => f.slice('--mount='.length).split(','))
      .filter((kv) => /^from=/i.test(kv))
      .map((kv) => kv.slice('from='.length));
  return [];
}

/**
 * Refuses (BuildRefusal) a Containerfile that starts from, or reads, an image other than the
 * platform's base images or its own earlier stages.
 */
export function checkContainerfile(text: string): void {
  const stages: string[] = [];
  let froms = 0;
  for (const instruction of containerfileInstructions(text)) {
    const [word, ...args] = instruction.split(/\s+/);
    const keyword = word.toUpperCase();
    for (const ref of referencesOf(keyword, args)) checkReference(ref, stages, keyword);
    if (keyword === 'FROM') {
      froms++;
      const as = args.findIndex((a) => a.toUpperCase() === 'AS');
      stages.push(as >= 0 && args[as + 1] ? args[as + 1].toLowerCase() : `#${stages.length}`);
    }
  }
  if (froms === 0) throw new BuildRefusal(`Containerfile: no FROM instruction (start from ${BASE_IMAGE})`);
}

function checkReference(ref: string, stages: string[], keyword: string): void {
  const where = keyword === 'FROM' ? 'FROM' : `${keyword} --from`;
  if (ref.includes('$')) throw new BuildRefusal(`Containerfile: ${where} ${ref}: image names from build arguments are not allowed`);
  if (stages.includes(ref.toLowerCase())) return;
  if (keyword !== 'FROM' && /^\d+$/.test(ref) && Number(ref) < stages.length) return;
  if (keyword === 'FROM' && ref.toLowerCase() === 'scratch') return;
  if (ALLOWED_BASES.has(ref)) return;
  throw new BuildRefusal(`Containerfile: ${where} ${ref}: only the platform's local images can be used (${BASE_IMAGE}); no registry is reachable`);
}

/** The package.json of `dir`, null when there is none; a BuildRefusal when it is not a JSON object. */
export async function readPackageJson(dir: string): Promise<PackageJson | null> {
  const text = await fs.readFile(path.join(dir, 'package.json'), 'utf8').catch(() => null);
  if (text === null) return null;
  try {
    const value = JSON.parse(text) as unknown;
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as PackageJson;
  } catch {
    // reported below
  }
  throw new BuildRefusal('package.json is not a valid JSON object');
}

const count = (deps: Record<string, string> | undefined) => (deps && typeof deps === 'object' ? Object.keys(deps).length : 0);

/**
 * The Containerfile of an app that has only a package.json. The app's files belong to the app's
 * user (npm writes node_modules as it); a build script gets the dev dependencies it needs, which are
 * pruned after it. npm's cache is removed in the same step, so it stays out of the image.
 */
export function generatedContainerfile(pkg: PackageJson): string {
  const deps = count(pkg.dependencies);
  const devDeps = count(pkg.devDependencies);
  const build = typeof pkg.scripts?.build === 'string';
  const steps: string[] = [];
  if (build) {
    if (deps + devDeps > 0) steps.push('npm install --include=dev');
    steps.push('npm run build');
    if (devDeps > 0) steps.push('npm prune --omit=dev');
  } else if (deps > 0) steps.push('npm install --omit=dev');
  const run = steps.length ? `RUN ${steps.join(' \\\n && ')} \\\n && rm -rf /tmp/.npm /tmp/node-compile-cache\n` : '';
  return `# Generated by the CaaS engine (providers/podman/app-build.ts) from package.json.
FROM ${BASE_IMAGE}
COPY --chown=${APP_UID}:${APP_UID} . /app
${run}CMD ["npm", "start"]
`;
}

/**
 * Makes everything in the build context readable by the app's user (files a+r, folders a+rx) whatever
 * the archive said: a Containerfile's plain `COPY . /app` then gives root-owned files uid 10001 can
 * read. Links are left alone (never followed).
 */
export async function makeContextReadable(dir: string): Promise<void> {
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    const { mode } = await fs.lstat(p);
    if (entry.isDirectory()) {
      if ((mode & 0o555) !== 0o555) await fs.chmod(p, (mode & 0o7777) | 0o555);
      await makeContextReadable(p);
    } else if (entry.isFile() && (mode & 0o444) !== 0o444) await fs.chmod(p, (mode & 0o7777) | 0o444);
  }
}
