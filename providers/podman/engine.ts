/**
 * The container apps' engine on one host: rootful podman (4.3, runc, netavark) driven through its
 * CLI with a configuration of its own in `dataDir` (docs/research/caas-podman.md). It knows nothing
 * of apps, deployments or the control plane's database: names, ports, uid ranges and networks come
 * from the caller, who stores them. Everything it made can be found again from podman itself
 * (`containers(labels)`), so a restarted API or worker just carries on.
 *
 * Each container is hardened the same way (research §4): its own uid range (`--uidmap`, no
 * /etc/subuid), no capabilities, no new privileges, a read-only root with a sized /tmp, memory (and
 * no swap), CPU and pids limits, tini-like init, the tenant's own network, and a port published on
 * 127.0.0.1 only. Env values go through a 0600 file removed right after `podman create`, never argv.
 *
 * Errors: podman missing is a LocalServerError naming scripts/install/caas.sh; podman failing or
 * not answering is BackendUnavailableError('caas'); an app's own failure (its build, its exit) is
 * an answer, not an error.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { LocalServerError, runningAsRoot, sleep, withFileLock } from '../local-server';
import { BuildRefusal, checkContainerfile, generatedContainerfile, makeContextReadable, readPackageJson } from './app-build';
import { APP_UID, BASE_IMAGE, baseInputs, buildBaseImage, currentFingerprint, fingerprintOf } from './base-image';
import { layoutOf, prepareDataDir, type DataDirLayout } from './config';
import { allowHostPort, ensureIsolationRules, removeIsolationRules } from './isolation';
import { DEFAULT_SUBNET_POOL, ensureNetwork, parseCidr } from './networks';
import { BACKEND, failureDetail, isAbsent, podmanCall, podmanJson, podmanOk, podmanToFile, podmanBinary, type PodmanResult } from './podman';
import { checkEnv, checkImage, checkLabels, checkName, checkResources } from './validate';

export interface PodmanEngineOptions {
  /** `<dataDir>/{containers.conf,storage.conf,root,run,networks,tmp,events.log}`, plus `base/` (the cached Debian tar). */
  dataDir: string;
  /** Subnet pool for tenant networks, e.g. '10.213.0.0/16' (a /24 per tenant network). */
  subnetPool?: string;
  /** The longest an app's build may take (default 15 minutes): past it, the build fails (ok false). */
  buildTimeoutMs?: number;
  /** Memory (and swap: none) of a build's RUN steps (default 2 GiB). */
  buildMemoryBytes?: number;
}

/** An app's build: `ok` false when the app's own build failed (build_failed); `log` then says why. */
export interface BuildResult {
  image: string;
  log: string;
  ok: boolean;
}

/** One container of a deployment. */
export interface RunSpec {
  /** Container name, e.g. `caas-<app>-<deployment>` (^[a-z0-9][a-z0-9_.-]{0,127}$). */
  name: string;
  image: string;
  /** Passed through an env file (0600, removed after create), never argv. */
  env: Record<string, string>;
  /** Published on 127.0.0.1:<hostPort> -> the container's `containerPort`. */
  hostPort: number;
  /** The app's $PORT (set in its env as PORT). */
  containerPort: number;
  memoryBytes: number;
  cpus: number;
  /** Processes and threads of the container (default 256). */
  pidsLimit?: number;
  /** The tenant's uid range: `--uidmap 0:<uidBase>:65536` (and gids): the app's uid 10001 is uidBase+10001 on the host. */
  uidBase: number;
  /** The tenant's network, created on demand with a /24 from the pool. */
  network: string;
  labels: Record<string, string>;
}

export type ContainerState = 'running' | 'exited' | 'missing';

const BASE_LOCK_TIMEOUT_MS = 20 * 60_000;
const DEFAULT_BUILD_TIMEOUT_MS = 15 * 60_000;
const DEFAULT_BUILD_MEMORY = 2 * 1024 * 1024 * 1024;
const DEFAULT_PIDS_LIMIT = 256;
const MAX_TMPFS = 64 * 1024 * 1024;
const REPLACE_GRACE_SECONDS = 10;
/** What a build's answer keeps of its log: the end, where the error is. */
const MAX_BUILD_LOG = 256 * 1024;
/** Env values an env file line cannot carry (line breaks, very long ones) go through podman's environment instead. */
const MAX_ENV_FILE_VALUE = 32 * 1024;

interface InspectedContainer {
  Id: string;
  State: { Status: string; ExitCode: number; Running: boolean };
  RestartCount?: number;
}

interface ListedContainer {
  Names: string[];
  State: string;
  Labels: Record<string, string> | null;
}

export class PodmanEngine {
  private readonly layout: DataDirLayout;
  private readonly pool: string;
  private readonly buildTimeoutMs: number;
  private readonly buildMemoryBytes: number;
  private readiness: Promise<void> | null = null;

  constructor(options: PodmanEngineOptions) {
    this.layout = layoutOf(path.resolve(options.dataDir));
    this.pool = options.subnetPool ?? DEFAULT_SUBNET_POOL;
    parseCidr(this.pool);
    this.buildTimeoutMs = options.buildTimeoutMs ?? DEFAULT_BUILD_TIMEOUT_MS;
    this.buildMemoryBytes = options.buildMemoryBytes ?? DEFAULT_BUILD_MEMORY;
  }

  /** Makes `localhost/caas-node:latest` once (DECISIONS: Debian, sh, Node.js 20 or newer, npm) under a file lock; idempotent, fast when present. */
  async ensureBaseImage(): Promise<{ image: string; built: boolean; ms: number }> {
    const started = Date.now();
    await this.ready();
    const inputs = await baseInputs();
    const fingerprint = await fingerprintOf(inputs);
    if ((await currentFingerprint(this.layout)) === fingerprint) return { image: BASE_IMAGE, built: false, ms: Date.now() - started };
    const built = await withFileLock(
      path.join(this.layout.dataDir, 'base.lock'),
      async () => {
        // Another process may have built it while this one waited for the lock.
        if ((await currentFingerprint(this.layout)) === fingerprint) return false;
        await buildBaseImage(this.layout, inputs, fingerprint);
        return true;
      },
      BASE_LOCK_TIMEOUT_MS,
    );
    return { image: BASE_IMAGE, built, ms: Date.now() - started };
  }

  /**
   * Builds `dir` into `image` (tag): a root `Containerfile` as is (local images only: FROM must be
   * localhost/caas-node or the Debian minbase; no registry is reachable), else from `package.json` a
   * generated Containerfile on caas-node (`npm install --omit=dev` if it has dependencies, `npm run
   * build` if it has a build script, `CMD npm start`). Labels given. Never throws for the app's own
   * failure: ok=false with the log. The files of `dir` are made readable by all (the app's user).
   */
  async build(dir: string, image: string, labels: Record<string, string>): Promise<BuildResult> {
    checkImage(image);
    checkLabels(labels);
    await this.ready();
    const buildDir = path.join(this.layout.tmpDir, `build-${randomBytes(6).toString('hex')}`);
    await fs.mkdir(buildDir, { mode: 0o700 });
    try {
      let containerfile: string;
      try {
        containerfile = await this.containerfileFor(dir, buildDir);
      } catch (err) {
        if (err instanceof BuildRefusal) return { image, ok: false, log: `${err.message}\n` };
        throw err;
      }
      await this.ensureBaseImage();
      await fs.chmod(dir, 0o755);
      await makeContextReadable(dir);
      return await this.runBuild(dir, containerfile, image, labels, path.join(buildDir, 'build.log'));
    } finally {
      await fs.rm(buildDir, { recursive: true, force: true });
    }
  }

  /** Creates and starts the container, hardened (see the class comment); replaces one of that name. Returns when started, not when listening. */
  async run(spec: RunSpec): Promise<{ id: string }> {
    checkName('container', spec.name);
    checkName('network', spec.network);
    checkImage(spec.image);
    checkLabels(spec.labels);
    checkEnv(spec.env);
    checkResources(spec);
    await this.ready();
    await ensureNetwork(this.layout, spec.network, this.pool);
    await this.remove(spec.name, REPLACE_GRACE_SECONDS);
    const id = await this.create(spec);
    const started = await podmanCall(this.layout, ['start', spec.name], { timeoutMs: 60_000 });
    if (started.code !== 0) {
      await podmanCall(this.layout, ['rm', '--force', '--ignore', spec.name]);
      throw new BackendUnavailableError(BACKEND, failureDetail(['start', spec.name], started));
    }
    return { id };
  }

  /** Until something answers TCP on 127.0.0.1:hostPort, or the container exited, or timeoutMs: 'listening' | 'exited' | 'timeout' (with the exit code if exited). */
  async waitListening(
    name: string,
    hostPort: number,
    timeoutMs: number,
  ): Promise<{ state: 'listening' | 'exited' | 'timeout'; exitCode: number | null; ms: number }> {
    checkName('container', name);
    const started = Date.now();
    const deadline = started + timeoutMs;
    let nextStateCheck = 0;
    for (;;) {
      if (await tcpAnswers(hostPort, Math.max(50, Math.min(1_000, deadline - Date.now()))))
        return { state: 'listening', exitCode: null, ms: Date.now() - started };
      if (Date.now() >= nextStateCheck) {
        const current = await this.state(name);
        if (current.state !== 'running') return { state: 'exited', exitCode: current.exitCode, ms: Date.now() - started };
        nextStateCheck = Date.now() + 250;
      }
      if (Date.now() >= deadline) return { state: 'timeout', exitCode: null, ms: Date.now() - started };
      await sleep(50);
    }
  }

  /** The last `lines` of the container's output (stdout and stderr), each with its timestamp, oldest first; [] for an absent container. */
  async logs(name: string, lines: number): Promise<Array<{ timestamp: string; message: string }>> {
    checkName('container', name);
    if (!Number.isInteger(lines) || lines < 1) throw new Error('lines must be a positive integer');
    await this.ready();
    const argv = ['logs', '--timestamps', '--tail', String(lines), name];
    const result = await podmanCall(this.layout, argv, { timeoutMs: 15_000 });
    if (isAbsent(result)) return [];
    if (result.code !== 0) throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
    return mergeLogStreams(result.stdout, result.stderr).slice(-lines);
  }

  /** Stops (SIGTERM, then SIGKILL after graceSeconds) and removes the container; absent is fine. */
  async remove(name: string, graceSeconds = 10): Promise<void> {
    checkName('container', name);
    await this.ready();
    const argv = ['rm', '--force', '--ignore', '--time', String(Math.max(0, Math.round(graceSeconds))), name];
    const timeoutMs = graceSeconds * 1_000 + 30_000;
    let result = await podmanCall(this.layout, argv, { timeoutMs });
    // podman 4.3 sometimes reports `unlinkat .../userdata/shm: device or resource busy` but did remove
    // the container (research §3): a second try says whether it is really still there.
    if (result.code !== 0 && !isAbsent(result)) result = await podmanCall(this.layout, argv, { timeoutMs });
    if (result.code !== 0 && !isAbsent(result)) throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
  }

  /** Removes an image (a superseded deployment's); absent is fine, one a container still uses is refused. */
  async removeImage(image: string): Promise<void> {
    checkImage(image);
    await this.ready();
    const argv = ['rmi', '--ignore', image];
    const result = await podmanCall(this.layout, argv, { timeoutMs: 60_000 });
    if (result.code === 0 || isAbsent(result)) return;
    if (/in use|being used/i.test(result.stderr)) throw new BackendRefusedError(BACKEND, 'The image is still used by a container.', 'image_in_use');
    throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
  }

  /** 'running' | 'exited' | 'missing', with the exit code (null while running or when missing) and how often podman restarted it. */
  async state(name: string): Promise<{ state: ContainerState; exitCode: number | null; restarts: number }> {
    checkName('container', name);
    await this.ready();
    const container = await this.inspect(name);
    if (!container) return { state: 'missing', exitCode: null, restarts: 0 };
    const running = container.State.Running || container.State.Status === 'running' || container.State.Status === 'paused';
    return { state: running ? 'running' : 'exited', exitCode: running ? null : container.State.ExitCode, restarts: container.RestartCount ?? 0 };
  }

  /** The containers carrying all these labels, whatever their state (reconcile after a restart). */
  async containers(labels: Record<string, string>): Promise<Array<{ name: string; state: string; labels: Record<string, string> }>> {
    checkLabels(labels);
    await this.ready();
    const filters = Object.entries(labels).flatMap(([k, v]) => ['--filter', `label=${k}=${v}`]);
    const listed = await podmanJson<ListedContainer[] | null>(this.layout, ['ps', '--all', '--format', 'json', ...filters]);
    return (listed ?? []).map((c) => ({ name: c.Names[0], state: c.State, labels: c.Labels ?? {} }));
  }

  /** Starts a stopped container again (after a host reboot); one already running is fine. */
  async start(name: string): Promise<void> {
    checkName('container', name);
    await this.ready();
    const argv = ['start', name];
    const result = await podmanCall(this.layout, argv, { timeoutMs: 60_000 });
    if (isAbsent(result)) throw new BackendGoneError(BACKEND, `container ${name}`);
    if (result.code !== 0) throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
  }

  /** Installs the isolation rules (iptables chains CAAS-FWD / CAAS-IN, egress blocked to 169.254.0.0/16 and `blockedRanges`); idempotent. */
  async ensureIsolation(blockedRanges: string[]): Promise<void> {
    for (const range of blockedRanges) parseCidr(range);
    await ensureIsolationRules(blockedRanges);
  }

  /** Removes the isolation rules (uninstalling the engine from a host, a test's clean-up); absent is fine. */
  async removeIsolation(): Promise<void> {
    await removeIsolationRules();
  }

  /**
   * The tenant network (created when missing): its gateway, the host's own address on it, and its
   * bridge; with `allowPort`, its containers may also connect to that port of the gateway (the
   * isolation rules refuse every other connection to the host).
   */
  async networkGateway(network: string, allowPort?: number): Promise<{ gateway: string; bridge: string }> {
    checkName('network', network);
    await this.ready();
    await ensureNetwork(this.layout, network, this.pool);
    const [info] = await podmanJson<Array<{ network_interface?: string; subnets?: Array<{ subnet: string; gateway?: string }> }>>(this.layout, [
      'network',
      'inspect',
      network,
    ]);
    const gateway = info?.subnets?.[0]?.gateway;
    const bridge = info?.network_interface;
    if (!gateway || !bridge) throw new BackendUnavailableError(BACKEND, `network ${network} has no gateway or bridge`);
    if (allowPort !== undefined) await allowHostPort(bridge, gateway, allowPort);
    return { gateway, bridge };
  }

  /** Removes a tenant network; absent is fine, one with containers still attached is refused. */
  async removeNetwork(network: string): Promise<void> {
    checkName('network', network);
    await this.ready();
    const argv = ['network', 'rm', network];
    const result = await podmanCall(this.layout, argv);
    if (result.code === 0 || isAbsent(result)) return;
    if (/in use|being used|associated/i.test(result.stderr)) throw new BackendRefusedError(BACKEND, 'The network still has containers.', 'network_in_use');
    throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
  }

  /**
   * Once per engine (again after a failure): root, podman installed, the data directory and its
   * configuration, and podman answering with that configuration (its graph root is ours).
   */
  private ready(): Promise<void> {
    this.readiness ??= this.prepare().catch((err: unknown) => {
      this.readiness = null;
      throw err;
    });
    return this.readiness;
  }

  private async prepare(): Promise<void> {
    if (!runningAsRoot()) throw new LocalServerError('container apps run on rootful podman, and this process is not root', 'run the API and worker as root');
    podmanBinary();
    await prepareDataDir(this.layout);
    const info = await podmanJson<{ store?: { graphRoot?: string } }>(this.layout, ['info', '--format', 'json'], { timeoutMs: 20_000 });
    if (info.store?.graphRoot !== this.layout.root)
      throw new BackendUnavailableError(
        BACKEND,
        `podman uses ${info.store?.graphRoot} rather than ${this.layout.root}: CONTAINERS_STORAGE_CONF was not honoured`,
      );
  }

  /** The Containerfile to build `dir` with: its own (checked), or one generated from its package.json. */
  private async containerfileFor(dir: string, buildDir: string): Promise<string> {
    const own = path.join(dir, 'Containerfile');
    const text = await fs.readFile(own, 'utf8').catch(() => null);
    if (text !== null) {
      checkContainerfile(text);
      return own;
    }
    const pkg = await readPackageJson(dir);
    if (!pkg) throw new BuildRefusal('Neither a Containerfile nor a package.json at the root of the source.');
    const generated = path.join(buildDir, 'Containerfile');
    await fs.writeFile(generated, generatedContainerfile(pkg), { mode: 0o600 });
    return generated;
  }

  private async runBuild(dir: string, containerfile: string, image: string, labels: Record<string, string>, logFile: string): Promise<BuildResult> {
    const memory = String(this.buildMemoryBytes);
    const argv = [
      'build',
      '--pull=never',
      '--layers',
      '--force-rm',
      '--memory',
      memory,
      '--memory-swap',
      memory,
      '--file',
      containerfile,
      '--tag',
      image,
      ...Object.entries(labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]),
      dir,
    ];
    const code = await podmanToFile(this.layout, argv, logFile, this.buildTimeoutMs);
    const log = await readTail(logFile, MAX_BUILD_LOG);
    if (code === 0) return { image, ok: true, log };
    if (code === 'timeout') return { image, ok: false, log: `${log}\nThe build did not finish within ${Math.round(this.buildTimeoutMs / 1000)} seconds.\n` };
    // A failed build is the app's, unless podman itself is not well: then it is the platform's.
    await podmanOk(this.layout, ['info', '--format', 'json'], { timeoutMs: 20_000 });
    return { image, ok: false, log };
  }

  /** `podman create` with the env in a 0600 file that exists only for the call. */
  private async create(spec: RunSpec): Promise<string> {
    const { text, viaEnvironment } = envFileOf(containerEnv(spec));
    const file = path.join(this.layout.tmpDir, `env-${randomBytes(8).toString('hex')}`);
    await fs.writeFile(file, text, { mode: 0o600, flag: 'wx' });
    try {
      const argv = createArgs(spec, file);
      const result = await podmanCall(this.layout, argv, { env: viaEnvironment, timeoutMs: 60_000 });
      if (result.code === 0) return result.stdout.trim();
      if (/image not known|no such image/i.test(result.stderr)) throw new BackendGoneError(BACKEND, `image ${spec.image}`);
      throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
    } finally {
      await fs.rm(file, { force: true });
    }
  }

  private async inspect(name: string): Promise<InspectedContainer | null> {
    const argv = ['container', 'inspect', '--format', 'json', name];
    const result: PodmanResult = await podmanCall(this.layout, argv);
    if (isAbsent(result)) return null;
    if (result.code !== 0) throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
    const parsed = JSON.parse(result.stdout) as InspectedContainer[];
    return parsed[0] ?? null;
  }
}

/** The container's env: the caller's, PORT, and a V8 heap bound under the memory limit unless NODE_OPTIONS is given. */
export function containerEnv(spec: RunSpec): Record<string, string> {
  const env: Record<string, string> = { ...spec.env, PORT: String(spec.containerPort) };
  // Node grows its heap towards the machine's memory, not the cgroup's: without a bound it is
  // killed by the OOM killer (exit 137) instead of collecting garbage.
  if (env.NODE_OPTIONS === undefined) env.NODE_OPTIONS = `--max-old-space-size=${Math.max(16, Math.floor((spec.memoryBytes / 1024 / 1024) * 0.75))}`;
  return env;
}

/**
 * The env file's text. podman reads it line by line (`NAME=value`, the value as is): a value with a
 * line break, or one too long for its line reader, is written as a bare `NAME`, which podman takes
 * from its own environment (`viaEnvironment`, given to the podman process only: /proc/<pid>/environ
 * is root's alone, and nothing reaches argv).
 */
export function envFileOf(env: Record<string, string>): { text: string; viaEnvironment: Record<string, string> } {
  const lines: string[] = [];
  const viaEnvironment: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (/[\r\n]/.test(value) || value.length > MAX_ENV_FILE_VALUE) {
      lines.push(name);
      viaEnvironment[name] = value;
    } else lines.push(`${name}=${value}`);
  }
  return { text: lines.length ? `${lines.join('\n')}\n` : '', viaEnvironment };
}

/**
 * The hardened `podman create` of a spec (research §4). The app runs as uid 10001 whatever its image
 * says (a Containerfile's `USER root` included), which the uid map puts at uidBase+10001 on the host.
 */
export function createArgs(spec: RunSpec, envFile: string): string[] {
  const tmpfs = Math.min(MAX_TMPFS, Math.max(4 * 1024 * 1024, Math.floor(spec.memoryBytes / 4)));
  const idRange = `0:${spec.uidBase}:65536`;
  return [
    'create',
    '--name',
    spec.name,
    '--init',
    '--cap-drop=all',
    '--security-opt',
    'no-new-privileges',
    '--read-only',
    '--read-only-tmpfs=false',
    '--tmpfs',
    `/tmp:rw,nosuid,nodev,size=${tmpfs},mode=1777`,
    '--pids-limit',
    String(spec.pidsLimit ?? DEFAULT_PIDS_LIMIT),
    '--memory',
    String(spec.memoryBytes),
    '--memory-swap',
    String(spec.memoryBytes),
    '--cpus',
    String(spec.cpus),
    '--uidmap',
    idRange,
    '--gidmap',
    idRange,
    '--user',
    `${APP_UID}:${APP_UID}`,
    '--network',
    spec.network,
    '--publish',
    `127.0.0.1:${spec.hostPort}:${spec.containerPort}/tcp`,
    '--env-file',
    envFile,
    ...Object.entries(spec.labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]),
    spec.image,
  ];
}

/** Whether something accepts a TCP connection on 127.0.0.1:port within `timeoutMs`. */
function tcpAnswers(port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * `podman logs --timestamps` writes the container's stdout and stderr to its own two streams: each
 * line starts with its RFC 3339 timestamp (nanoseconds), so the two merge back into one order.
 */
export function mergeLogStreams(stdout: string, stderr: string): Array<{ timestamp: string; message: string }> {
  const parse = (text: string) =>
    text
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => {
        const space = line.indexOf(' ');
        const raw = space < 0 ? line : line.slice(0, space);
        return { raw, key: sortKey(raw), message: space < 0 ? '' : line.slice(space + 1) };
      });
  return [...parse(stdout), ...parse(stderr)]
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map((l) => ({ timestamp: isoTimestamp(l.raw), message: l.message }));
}

/** A sortable key of an RFC 3339 timestamp: UTC milliseconds, then the nanoseconds beyond them. */
function sortKey(raw: string): string {
  const ms = Date.parse(raw);
  const fraction = /\.(\d+)/.exec(raw)?.[1] ?? '';
  return `${String(Number.isNaN(ms) ? 0 : ms).padStart(15, '0')}${fraction.padEnd(9, '0').slice(3, 9)}`;
}

function isoTimestamp(raw: string): string {
  const ms = Date.parse(raw);
  return Number.isNaN(ms) ? raw : new Date(ms).toISOString();
}

/** The last `maxBytes` of a file (a build's log), from a line start when cut. */
async function readTail(file: string, maxBytes: number): Promise<string> {
  const handle = await fs.open(file, 'r').catch(() => null);
  if (!handle) return '';
  try {
    const { size } = await handle.stat();
    const length = Math.min(size, maxBytes);
    const buf = Buffer.alloc(length);
    await handle.read(buf, 0, length, size - length);
    const text = buf.toString('utf8');
    return size > maxBytes ? text.slice(text.indexOf('\n') + 1) : text;
  } finally {
    await handle.close();
  }
}
