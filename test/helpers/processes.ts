import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, openSync, readFileSync, rmSync, chmodSync } from 'node:fs';
import { createServer, createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { Connection } from '@temporalio/client';
import { DEV_SERVER_SEARCH_ATTRIBUTE_ARGS } from '../../infra/temporal';

/**
 * Real processes for fault tests: a private PostgreSQL cluster, a Temporal dev server on a database
 * file, and the API and the worker as child processes, each on free loopback ports, in a temporary
 * directory, killed and removed when the test file ends (and when its process exits). Tests freeze
 * (SIGSTOP), kill (SIGKILL) and restart them as an operator would.
 */
const root = path.resolve(__dirname, '../..');
const TEMPORAL_CLI = path.join(root, '.tools/venv/bin/temporal');
const PG_BIN = '/usr/lib/postgresql/15/bin';
const run = promisify(execFile);

const everything = new Set<ManagedProcess>();
process.once('exit', () => {
  for (const p of everything) p.child?.kill('SIGKILL');
});

/** A port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

export async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000, everyMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`${what} not within ${timeoutMs} ms`);
}

/**
 * Waits until a Temporal server's frontend answers (GetSystemInfo), not only its port: a dev server
 * listens a while before its frontend is healthy ("Frontend is not healthy yet"), longer on a busy
 * machine, and a client that connects in between fails.
 */
export async function untilTemporalAnswers(address: string, timeoutMs = 60_000): Promise<void> {
  await until(
    `the Temporal frontend at ${address}`,
    async () => {
      const connection = await Connection.connect({ address, connectTimeout: 2_000 });
      try {
        await connection.workflowService.getSystemInfo({});
        return true;
      } finally {
        await connection.close();
      }
    },
    timeoutMs,
    200,
  );
}

/** A temporary directory for one test file's processes (removed by cleanup()). */
export function scratchDir(name: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `cloud-${name}-`));
  chmodSync(dir, 0o755);
  return dir;
}

/** One child process that can be started again with the same command, frozen, thawed and killed. */
export class ManagedProcess {
  child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    readonly name: string,
    private readonly command: string,
    private readonly args: string[],
    private readonly options: { env?: NodeJS.ProcessEnv; logFile: string; cwd?: string },
  ) {
    everything.add(this);
  }

  start(): void {
    const log = openSync(this.options.logFile, 'a');
    const child = spawn(this.command, this.args, { cwd: this.options.cwd ?? root, env: this.options.env ?? process.env, stdio: ['ignore', log, log] });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.running) this.child!.kill(sig);
  }

  /** SIGKILL, and wait for it to be gone. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.child!.kill('SIGCONT');
    this.child!.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.running) return;
    this.child!.kill('SIGCONT');
    this.child!.kill('SIGTERM');
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  log(): string {
    try {
      return readFileSync(this.options.logFile, 'utf8');
    } catch {
      return '';
    }
  }

  forget(): void {
    everything.delete(this);
  }
}

/** A private PostgreSQL 15 cluster (initdb as `postgres`), with the `cloud` superuser and database. */
export class PostgresCluster {
  readonly url: string;
  private readonly data: string;

  private constructor(
    private readonly dir: string,
    readonly port: number,
  ) {
    this.data = path.join(dir, 'pg');
    this.url = `postgres://cloud:cloud@127.0.0.1:${port}/cloud`;
  }

  static async create(dir: string): Promise<PostgresCluster> {
    const cluster = new PostgresCluster(dir, await freePort());
    // The cluster belongs to `postgres`, which must be able to enter the directory.
    chownSync(dir, uidOf('postgres'), uidOf('postgres'));
    await cluster.asPostgres(`${PG_BIN}/initdb`, ['-D', cluster.data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
    await cluster.start();
    await cluster.asPostgres(`${PG_BIN}/psql`, [
      '-h',
      '127.0.0.1',
      '-p',
      String(cluster.port),
      '-U',
      'postgres',
      '-qc',
      "create role cloud login superuser password 'cloud'",
    ]);
    await cluster.asPostgres(`${PG_BIN}/psql`, ['-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', '-qc', 'create database cloud owner cloud']);
    return cluster;
  }

  private asPostgres(command: string, args: string[]) {
    // From `/`: postgres may not read the directory the test runs in.
    return run('runuser', ['-u', 'postgres', '--', command, ...args], { cwd: '/', timeout: 60_000 });
  }

  async start(): Promise<void> {
    await this.asPostgres(`${PG_BIN}/pg_ctl`, [
      '-D',
      this.data,
      '-l',
      path.join(this.dir, 'postgres.log'),
      '-w',
      '-t',
      '30',
      '-o',
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`,
      'start',
    ]);
  }

  /** A fast shutdown: connections are cut, as when an operator stops the server. */
  async stop(): Promise<void> {
    await this.asPostgres(`${PG_BIN}/pg_ctl`, ['-D', this.data, '-m', 'fast', '-w', '-t', '30', 'stop']).catch(() => undefined);
  }

  async destroy(): Promise<void> {
    await this.asPostgres(`${PG_BIN}/pg_ctl`, ['-D', this.data, '-m', 'immediate', '-w', '-t', '30', 'stop']).catch(() => undefined);
  }
}

function uidOf(user: string): number {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${user}:`));
  if (!line) throw new Error(`no user ${user}`);
  return Number(line.split(':')[2]);
}

/**
 * The arguments of a headless Temporal dev server on loopback ports, as every test server runs it
 * (updates enabled, the control plane's search attributes); `extra` adds e.g. `--db-filename`.
 */
export function devServerArgs(ports: { port: number; httpPort: number; metricsPort: number }, extra: string[] = []): string[] {
  return [
    'server',
    'start-dev',
    '--headless',
    '--ip',
    '127.0.0.1',
    '--port',
    String(ports.port),
    '--http-port',
    String(ports.httpPort),
    '--metrics-port',
    String(ports.metricsPort),
    ...extra,
    '--log-level',
    'error',
    '--dynamic-config-value',
    'frontend.enableUpdateWorkflowExecution=true',
    ...DEV_SERVER_SEARCH_ATTRIBUTE_ARGS,
  ];
}

/** The Temporal dev server (CLI from .tools/) on free ports, its state in a SQLite file: restartable on that file. */
export class TemporalServer {
  readonly process: ManagedProcess;

  private constructor(
    dir: string,
    readonly port: number,
    httpPort: number,
    metricsPort: number,
  ) {
    this.process = new ManagedProcess(
      'temporal',
      TEMPORAL_CLI,
      devServerArgs({ port, httpPort, metricsPort }, ['--db-filename', path.join(dir, 'temporal.db')]),
      { env: { ...process.env, TEMPORAL_VERSION_CHECK_DISABLED: '1' }, logFile: path.join(dir, 'temporal.log') },
    );
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  static async create(dir: string): Promise<TemporalServer> {
    const server = new TemporalServer(dir, await freePort(), await freePort(), await freePort());
    await server.start();
    return server;
  }

  async start(): Promise<void> {
    this.process.start();
    await until('Temporal', () => portOpen(this.port), 60_000);
    await untilTemporalAnswers(this.address);
  }
}

/** The API (`api/server.ts`) or the worker (`workers/main.ts`) as a child process under this Node. */
export function serviceProcess(name: 'api' | 'worker', dir: string, env: Record<string, string>): ManagedProcess {
  const entry = name === 'api' ? 'api/server.ts' : 'workers/main.ts';
  return new ManagedProcess(name, process.execPath, ['--import', 'tsx', entry], {
    env: {
      ...process.env,
      LOG_LEVEL: 'warn',
      NODE_ENV: 'test',
      CLOUD_DEV_ENDPOINTS: '1',
      WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
      ...(name === 'worker' ? { WORKFLOW_BUNDLE_PATH: inject('workflowBundlePath') } : {}),
      ...env,
    },
    logFile: path.join(dir, `${name}.log`),
  });
}

/** Waits until the API child answers /readyz. */
export async function apiReady(port: number, timeoutMs = 60_000): Promise<void> {
  await until('the API', async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).ok, timeoutMs, 200);
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
