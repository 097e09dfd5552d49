/**
 * The one way the CaaS engine talks to podman: `execFile('podman', argv)`, never a shell, always with
 * a timeout, with an environment of its own. podman has no daemon, so every call is a process; the
 * two variables below make each of them use the engine's own configuration (docs/research/caas-podman.md §1):
 * images, containers, networks and events live in the engine's data directory, nothing in /etc.
 *
 * The environment is built from scratch rather than inherited: the API's and worker's own secrets
 * (database URLs, keys) must not reach podman, conmon or a build's RUN steps. Proxy variables are
 * the exception: podman build hands them to RUN steps without writing them into the image
 * (`--http-proxy`, on by default), which is how a build behind a proxy reaches the npm registry.
 */
import { execFile, spawn } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BackendUnavailableError } from '../errors';
import { requireBinary } from '../local-server';

export const BACKEND = 'caas';
export const INSTALL = { what: 'podman (container apps)', script: 'scripts/install/caas.sh' };
/** Most calls are quick (inspect, ps, create, start): past this, podman is stuck (a lock, a hung runtime). */
export const DEFAULT_TIMEOUT_MS = 30_000;
const MAX_OUTPUT = 32 * 1024 * 1024;
const PROXY_VARS = ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy'];

export interface PodmanResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface PodmanCallOptions {
  timeoutMs?: number;
  /** Variables added to the call's environment (env values that cannot go through an env file). */
  env?: Record<string, string>;
}

/** The files of a data directory that podman reads its configuration from. */
export interface PodmanFiles {
  containersConf: string;
  storageConf: string;
  registriesConf: string;
  tmpDir: string;
}

export function podmanFiles(dataDir: string): PodmanFiles {
  return {
    containersConf: path.join(dataDir, 'containers.conf'),
    storageConf: path.join(dataDir, 'storage.conf'),
    registriesConf: path.join(dataDir, 'registries.conf'),
    tmpDir: path.join(dataDir, 'tmp'),
  };
}

/** podman's environment: a fixed PATH, the engine's configuration files, and the host's proxy settings if any. */
export function podmanEnvironment(files: PodmanFiles, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: process.env.HOME ?? '/root',
    LANG: 'C.UTF-8',
    TMPDIR: files.tmpDir,
    CONTAINERS_CONF: files.containersConf,
    CONTAINERS_STORAGE_CONF: files.storageConf,
    CONTAINERS_REGISTRIES_CONF: files.registriesConf,
  };
  for (const name of PROXY_VARS) if (process.env[name]) env[name] = process.env[name];
  return { ...env, ...extra };
}

/** The podman binary, or the error that says how to install it. */
export function podmanBinary(): string {
  return requireBinary('podman', INSTALL);
}

/**
 * Runs podman with `argv` and resolves with its exit code and output, whatever the code: the
 * caller knows which failures are expected ("no such container"). Only a call that could not run
 * or did not finish in time rejects, with BackendUnavailableError.
 */
export function podmanCall(files: PodmanFiles, argv: string[], opts: PodmanCallOptions = {}): Promise<PodmanResult> {
  const binary = podmanBinary();
  const timeout = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    execFile(
      binary,
      argv,
      { env: podmanEnvironment(files, opts.env), timeout, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (!err) return resolve({ code: 0, stdout, stderr });
        const failure = err as NodeJS.ErrnoException & { killed?: boolean; code?: number | string };
        if (failure.killed) return reject(new BackendUnavailableError(BACKEND, `podman ${argv[0]} did not finish within ${timeout} ms`));
        if (typeof failure.code !== 'number') return reject(new BackendUnavailableError(BACKEND, `podman ${argv[0]} could not run: ${failure.message}`));
        resolve({ code: failure.code, stdout, stderr });
      },
    );
  });
}

/** The last lines of a failed call's output, for an error's detail (podman never sees a secret in argv). */
export function failureDetail(argv: string[], result: PodmanResult): string {
  const tail = `${result.stderr}\n${result.stdout}`.trim().split('\n').slice(-4).join(' | ');
  return `podman ${argv.slice(0, 2).join(' ')} exited ${result.code}: ${tail || 'no output'}`;
}

/** Runs podman and returns its standard output; any non-zero exit is the platform's failure. */
export async function podmanOk(files: PodmanFiles, argv: string[], opts: PodmanCallOptions = {}): Promise<string> {
  const result = await podmanCall(files, argv, opts);
  if (result.code !== 0) throw new BackendUnavailableError(BACKEND, failureDetail(argv, result));
  return result.stdout;
}

/** Runs podman with `--format json` (the caller puts it in argv) and parses the answer. */
export async function podmanJson<T>(files: PodmanFiles, argv: string[], opts: PodmanCallOptions = {}): Promise<T> {
  const stdout = await podmanOk(files, argv, opts);
  try {
    return JSON.parse(stdout.trim() || 'null') as T;
  } catch {
    throw new BackendUnavailableError(BACKEND, `podman ${argv[0]} answered something that is not JSON: ${stdout.slice(0, 200)}`);
  }
}

/** Whether a failed call failed only because the thing it names does not exist. */
export function isAbsent(result: PodmanResult): boolean {
  return result.code !== 0 && /no such (container|object|image)|not known|image not known|unable to find network|network not found/i.test(result.stderr);
}

/**
 * Runs podman with its standard output and error both going to `logFile`, in the order written
 * (a build's log). Past `timeoutMs` it gets SIGTERM, then SIGKILL 10 s later. Resolves with the
 * exit code, or 'timeout'; rejects only when podman could not be started.
 */
export async function podmanToFile(files: PodmanFiles, argv: string[], logFile: string, timeoutMs: number): Promise<number | 'timeout'> {
  const binary = podmanBinary();
  const log = await fs.open(logFile, 'w', 0o600);
  try {
    const child = spawn(binary, argv, { env: podmanEnvironment(files), stdio: ['ignore', log.fd, log.fd] });
    let timedOut = false;
    const term = setTimeout(() => {
      timedOut = true;
      child.kill('SIGTERM');
    }, timeoutMs);
    const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 10_000);
    try {
      const code = await new Promise<number | null>((resolve, reject) => {
        child.once('error', (err) => reject(new BackendUnavailableError(BACKEND, `podman ${argv[0]} could not run: ${err.message}`)));
        child.once('close', resolve);
      });
      return timedOut ? 'timeout' : (code ?? 1);
    } finally {
      clearTimeout(term);
      clearTimeout(kill);
    }
  } finally {
    await log.close();
  }
}
