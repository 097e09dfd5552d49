/**
 * The base image every app builds on, made on this host since no registry is reachable
 * (docs/research/caas-podman.md §2a; DECISIONS "CaaS": Debian, sh, Node.js 20 or newer, npm):
 *
 * 1. a Debian bookworm minbase root file system from `mmdebstrap`, through the same mirror the host's
 *    apt uses, cached as a tar in the data directory (a rebuild does not bootstrap Debian again);
 * 2. imported as `localhost/caas-debian-minbase:bookworm`;
 * 3. `localhost/caas-node:latest` on top: the project's own Node binary (the v24 of node_modules),
 *    an npm that runs on it, the host's own extra CA certificates (HTTPS here goes through a proxy
 *    with a private CA: without them neither npm nor an app's fetch could reach anything), an
 *    unprivileged user 10001 and WORKDIR /app.
 *
 * The image carries a fingerprint of what went into it (label `caas.base.fingerprint`): a new Node
 * binary, npm or CA set makes the next `ensureBaseImage` build it again; otherwise it is a lookup.
 */
import { createHash } from 'node:crypto';
import { existsSync, promises as fs, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { BackendUnavailableError } from '../errors';
import { CommandError, findBinary, LocalServerError, makeDirectory, requireBinary, run } from '../local-server';
import { type DataDirLayout } from './config';
import { BACKEND, INSTALL, failureDetail, podmanCall, podmanEnvironment, podmanOk } from './podman';

export const BASE_IMAGE = 'localhost/caas-node:latest';
export const MINBASE_IMAGE = 'localhost/caas-debian-minbase:bookworm';
/** The uid (and gid) apps run as inside their containers. */
export const APP_UID = 10001;
export const FINGERPRINT_LABEL = 'caas.base.fingerprint';
const SUITE = 'bookworm';
const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
const DEFAULT_SECURITY = 'http://deb.debian.org/debian-security';
const BOOTSTRAP_TIMEOUT_MS = 15 * 60_000;
const IMPORT_TIMEOUT_MS = 5 * 60_000;
const BUILD_TIMEOUT_MS = 10 * 60_000;
const REPO_ROOT = path.resolve(__dirname, '..', '..');

/** What `caas-node` is made of, found on this host. */
export interface BaseInputs {
  node: string;
  npmDir: string;
  caFiles: string[];
}

/** The node binary: the project's own (node_modules/node, v24), else the one running this process. */
function nodeBinary(): string {
  const own = path.join(REPO_ROOT, 'node_modules', 'node', 'bin', 'node');
  return existsSync(own) ? own : process.execPath;
}

/** An npm package directory: the project's own `npm` dependency if any, else the system npm's. */
function npmDirectory(): string {
  const own = path.join(REPO_ROOT, 'node_modules', 'npm');
  if (isNpmPackage(own)) return own;
  const bin = findBinary('npm');
  if (bin) {
    // /usr/bin/npm -> /usr/lib/node_modules/npm/bin/npm-cli.js
    const dir = path.dirname(path.dirname(realpathSync(bin)));
    if (isNpmPackage(dir)) return dir;
  }
  throw new LocalServerError('npm is missing: the base image of container apps needs a copy of it', 'install npm (apt-get install npm, or npm i -D npm)');
}

function isNpmPackage(dir: string): boolean {
  try {
    return (
      existsSync(path.join(dir, 'bin', 'npm-cli.js')) && (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string }).name === 'npm'
    );
  } catch {
    return false;
  }
}

/** The host's own CA certificates (Debian keeps local ones in /usr/local/share/ca-certificates). */
async function localCaFiles(): Promise<string[]> {
  const dir = '/usr/local/share/ca-certificates';
  const names = await fs.readdir(dir).catch(() => [] as string[]);
  return names.filter((n) => n.endsWith('.crt')).map((n) => path.join(dir, n));
}

export async function baseInputs(): Promise<BaseInputs> {
  return { node: nodeBinary(), npmDir: npmDirectory(), caFiles: await localCaFiles() };
}

/** The Containerfile of `caas-node`; its build contexts: `node` (the binary's folder), `npm`, and the main one (hosts, ca/). */
export function baseContainerfile(nodeFile: string): string {
  return `# Written by the CaaS engine (providers/podman/base-image.ts).
FROM ${MINBASE_IMAGE}
COPY --from=node ${nodeFile} /usr/local/bin/node
COPY --from=npm . /usr/local/lib/node_modules/npm
COPY ca/ /usr/local/share/ca-certificates/
COPY hosts /etc/hosts
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && update-ca-certificates >/dev/null 2>&1 \\
 && groupadd --gid ${APP_UID} app \\
 && useradd --uid ${APP_UID} --gid ${APP_UID} --home-dir /app --create-home --shell /bin/sh app \\
 && node --version && npm --version \\
 && rm -rf /tmp/* /root/.npm
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt NODE_ENV=production npm_config_cache=/tmp/.npm npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
WORKDIR /app
USER ${APP_UID}
CMD ["node"]
`;
}

const HOSTS = '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n';

/** A digest of everything that goes into `caas-node`: when it changes, the image is built again. */
export async function fingerprintOf(inputs: BaseInputs): Promise<string> {
  const hash = createHash('sha256');
  const node = await fs.stat(inputs.node);
  const npm = JSON.parse(await fs.readFile(path.join(inputs.npmDir, 'package.json'), 'utf8')) as { version?: string };
  hash.update(`${baseContainerfile(path.basename(inputs.node))}\n${HOSTS}\nnode ${node.size} ${node.mtimeMs}\nnpm ${npm.version}\n`);
  for (const file of inputs.caFiles) hash.update(`${path.basename(file)}\n`).update(await fs.readFile(file));
  return hash.digest('hex').slice(0, 32);
}

/**
 * The Debian mirrors the host's apt uses (`/etc/apt/sources.list` and `sources.list.d`, one-line and
 * deb822), so a machine behind a mirror or a proxy's snapshot gets bookworm from the same place:
 * the first `deb` URI of a non-security suite and of a `-security` suite; deb.debian.org when none.
 */
export async function debianMirrors(): Promise<{ main: string; security: string }> {
  const entries = await aptEntries();
  const debs = entries.filter((e) => e.types.includes('deb') && /^https?:\/\//.test(e.uri));
  const security = debs.find((e) => e.suites.some((s) => s.endsWith('-security')));
  const main = debs.find((e) => e.suites.some((s) => !s.endsWith('-security')));
  return { main: main?.uri.replace(/\/+$/, '') ?? DEFAULT_MIRROR, security: security?.uri.replace(/\/+$/, '') ?? DEFAULT_SECURITY };
}

interface AptEntry {
  types: string[];
  uri: string;
  suites: string[];
}

async function aptEntries(): Promise<AptEntry[]> {
  const dir = '/etc/apt/sources.list.d';
  const files = ['/etc/apt/sources.list', ...(await fs.readdir(dir).catch(() => [] as string[])).map((n) => path.join(dir, n))];
  const entries: AptEntry[] = [];
  for (const file of files) {
    const text = await fs.readFile(file, 'utf8').catch(() => '');
    if (file.endsWith('.sources')) entries.push(...parseDeb822(text));
    else if (file.endsWith('.list')) entries.push(...parseOneLine(text));
  }
  return entries;
}

export function parseOneLine(text: string): AptEntry[] {
  return text
    .split('\n')
    .map((line) =>
      line
        .replace(/#.*/, '')
        .replace(/\[[^\]]*\]/, '')
        .trim()
        .split(/\s+/),
    )
    .filter((words) => (words[0] === 'deb' || words[0] === 'deb-src') && words.length >= 3)
    .map((words) => ({ types: [words[0]], uri: words[1], suites: [words[2]] }));
}

export function parseDeb822(text: string): AptEntry[] {
  return text
    .split(/\n\s*\n/)
    .map((stanza) => {
      const fields = new Map<string, string>();
      for (const line of stanza.split('\n')) {
        const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
        if (m) fields.set(m[1].toLowerCase(), m[2].trim());
      }
      return fields;
    })
    .filter((f) => f.get('enabled')?.toLowerCase() !== 'no' && f.has('uris') && f.has('suites'))
    .flatMap((f) =>
      (f.get('uris') ?? '').split(/\s+/).map((uri) => ({ types: (f.get('types') ?? '').split(/\s+/), uri, suites: (f.get('suites') ?? '').split(/\s+/) })),
    );
}

const TMPFS_MAGIC = 0x01021994;

/**
 * Where mmdebstrap unpacks Debian before it makes the tar: /dev/shm when it is a tmpfs with room
 * to spare, else the data directory. Installing some 6,000 files and removing them again costs a
 * disk seconds, a tmpfs almost nothing (measured here under load: 65 s on disk, 30 s on /dev/shm).
 */
async function bootstrapTmpDir(layout: DataDirLayout): Promise<string> {
  const stats = await fs.statfs('/dev/shm').catch(() => null);
  const free = stats ? stats.bavail * stats.bsize : 0;
  return stats?.type === TMPFS_MAGIC && free > 2 * 1024 * 1024 * 1024 ? '/dev/shm' : layout.tmpDir;
}

/** The cached minbase tar, made with mmdebstrap when missing (written aside, renamed when complete). */
export async function minbaseTar(layout: DataDirLayout): Promise<string> {
  const dir = path.join(layout.dataDir, 'base');
  const name = `debian-minbase-${SUITE}.tar`;
  const tar = path.join(dir, name);
  if (existsSync(tar)) return tar;
  await makeDirectory(dir, 0o700);
  // Another data directory of this machine (a second checkout, a test) may have made it already.
  const shared = path.join(SHARED_CACHE_DIR, name);
  if (existsSync(shared)) {
    await fs.copyFile(shared, `${tar}.partial`);
    await fs.rename(`${tar}.partial`, tar);
    return tar;
  }
  const mmdebstrap = requireBinary('mmdebstrap', INSTALL);
  const { main, security } = await debianMirrors();
  const partial = `${tar}.partial`;
  // Documentation and translations are of no use in a container; one --dpkgopt per path (dpkg globs have no braces).
  const excludes = ['doc', 'man', 'info', 'locale'].map((p) => `--dpkgopt=path-exclude=/usr/share/${p}/*`);
  const mirrors = [`deb ${main} ${SUITE} main`, `deb ${main} ${SUITE}-updates main`, `deb ${security} ${SUITE}-security main`];
  const argv = ['--variant=minbase', '--include=ca-certificates', '--mode=root', '--format=tar', '--quiet', ...excludes, SUITE, partial, ...mirrors];
  try {
    await run(mmdebstrap, argv, { timeoutMs: BOOTSTRAP_TIMEOUT_MS, env: podmanEnvironment(layout, { TMPDIR: await bootstrapTmpDir(layout) }) });
  } catch (err) {
    await fs.rm(partial, { force: true });
    throw new BackendUnavailableError(BACKEND, `mmdebstrap of Debian ${SUITE} from ${main} failed: ${err instanceof CommandError ? err.detail : String(err)}`);
  }
  await fs.rename(partial, tar);
  await shareMinbase(tar, shared);
  return tar;
}

/**
 * The machine-wide copy of the Debian minbase tar (root's, 0700), which every data directory of
 * this machine starts from instead of running mmdebstrap again (CAAS_BASE_CACHE_DIR; a refresh is
 * deleting it). Its file is replaced whole (written aside, renamed), so a reader never sees half.
 */
export const SHARED_CACHE_DIR = process.env.CAAS_BASE_CACHE_DIR ?? '/var/cache/cloud-caas';

async function shareMinbase(tar: string, shared: string): Promise<void> {
  try {
    await makeDirectory(path.dirname(shared), 0o700);
    await fs.copyFile(tar, `${shared}.${process.pid}.partial`);
    await fs.rename(`${shared}.${process.pid}.partial`, shared);
  } catch {
    // Only a cache: the next data directory runs mmdebstrap itself.
  }
}

async function imageExists(layout: DataDirLayout, image: string): Promise<boolean> {
  return (await podmanCall(layout, ['image', 'exists', image])).code === 0;
}

/** The fingerprint label of `caas-node` as it is now, or null when there is no such image. */
export async function currentFingerprint(layout: DataDirLayout): Promise<string | null> {
  const result = await podmanCall(layout, ['image', 'inspect', '--format', `{{index .Labels "${FINGERPRINT_LABEL}"}}`, BASE_IMAGE]);
  return result.code === 0 ? result.stdout.trim() || null : null;
}

async function ensureMinbase(layout: DataDirLayout): Promise<void> {
  if (await imageExists(layout, MINBASE_IMAGE)) return;
  const tar = await minbaseTar(layout);
  await podmanOk(layout, ['import', '--quiet', '--change', 'CMD ["/bin/sh"]', tar, MINBASE_IMAGE], { timeoutMs: IMPORT_TIMEOUT_MS });
}

/** Writes the main build context (Containerfile, hosts, ca/) into a fresh folder under the data directory. */
async function writeContext(layout: DataDirLayout, inputs: BaseInputs): Promise<string> {
  const context = path.join(layout.dataDir, 'base', 'context');
  await fs.rm(context, { recursive: true, force: true });
  await makeDirectory(path.join(context, 'ca'), 0o700);
  await fs.writeFile(path.join(context, 'Containerfile'), baseContainerfile(path.basename(inputs.node)));
  await fs.writeFile(path.join(context, 'hosts'), HOSTS);
  for (const file of inputs.caFiles) await fs.copyFile(file, path.join(context, 'ca', path.basename(file)));
  return context;
}

/** Builds `caas-node` (the minbase imported first, from the cached tar when there is one). Call under the base lock. */
export async function buildBaseImage(layout: DataDirLayout, inputs: BaseInputs, fingerprint: string): Promise<void> {
  await ensureMinbase(layout);
  const context = await writeContext(layout, inputs);
  const argv = [
    'build',
    '--pull=never',
    '--quiet',
    '--build-context',
    `node=${path.dirname(inputs.node)}`,
    '--build-context',
    `npm=${inputs.npmDir}`,
    '--label',
    `${FINGERPRINT_LABEL}=${fingerprint}`,
    '--tag',
    BASE_IMAGE,
    context,
  ];
  const result = await podmanCall(layout, argv, { timeoutMs: BUILD_TIMEOUT_MS });
  await fs.rm(context, { recursive: true, force: true });
  if (result.code !== 0) throw new BackendUnavailableError(BACKEND, `the base image ${BASE_IMAGE} did not build: ${failureDetail(argv, result)}`);
}
