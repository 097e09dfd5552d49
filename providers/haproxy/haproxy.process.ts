import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { findBinary, probeBind, processAlive, processExists, readPidFile, sleep } from '../local-server';

/**
 * The HAProxy processes themselves: checking a configuration, starting a master-worker daemon,
 * talking to its master CLI and its stats socket, finding it again from its pidfile.
 */

/** Debian installs haproxy in /usr/sbin, which is not on every user's PATH. */
export function defaultHaproxyBinary(): string {
  return findBinary('haproxy') ?? 'haproxy';
}

export interface CheckResult {
  ok: boolean;
  output: string;
}

/** `haproxy -c`: parses and checks the file without binding anything (not `-q`: it would hide the alerts). */
export function checkConfig(bin: string, configPath: string): Promise<CheckResult> {
  return new Promise((resolve, reject) => {
    execFile(bin, ['-c', '-f', configPath], { timeout: 15_000, env: { PATH: process.env.PATH ?? '' } }, (err, stdout, stderr) => {
      if (err && (err as NodeJS.ErrnoException).code === 'ENOENT') return reject(err);
      resolve({ ok: !err, output: `${stdout}\n${stderr}` });
    });
  });
}

export interface MasterPaths {
  config: string;
  pidfile: string;
  masterSocket: string;
}

/**
 * Starts HAProxy in master-worker mode as a daemon (`-W -D`): the launcher exits once the master
 * has forked its worker, and the master outlives the process that started it (it is found again
 * through the pidfile). Resolves with the launcher's exit code and what it printed.
 */
export function startMaster(bin: string, paths: MasterPaths): Promise<CheckResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ['-W', '-D', '-S', `${paths.masterSocket},mode,600`, '-p', paths.pidfile, '-f', paths.config], {
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '' },
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    // 'exit', not 'close': the daemon may keep the launcher's pipes open.
    child.on('exit', (code) => {
      child.stdout.destroy();
      child.stderr.destroy();
      resolve({ ok: code === 0, output });
    });
    child.unref();
  });
}

/** One command on a HAProxy CLI socket (master or stats): sends it, half-closes, reads until HAProxy closes. */
export function cliCommand(socketPath: string, command: string, timeoutMs = 2_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ path: socketPath });
    let out = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to "${command}" within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.end(`${command}\n`));
    socket.on('data', (d: string) => (out += d));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
  });
}

export interface ProcState {
  masterPid: number;
  reloads: number;
  failedReloads: number;
  /** Current workers (the ones of the latest configuration). */
  workers: number[];
}

/** Parses the master CLI's `show proc`. */
export function parseShowProc(text: string): ProcState | null {
  const lines = text.split('\n');
  const master = lines.map((l) => /^(\d+)\s+master\s+(\d+)\s+\[failed:\s*(\d+)\]/.exec(l)).find(Boolean);
  if (!master) return null;
  const workers: number[] = [];
  let section = '';
  for (const line of lines) {
    if (line.startsWith('# ')) section = line.slice(2).trim();
    const worker = /^(\d+)\s+worker\s/.exec(line);
    if (worker && section === 'workers') workers.push(Number(worker[1]));
  }
  return { masterPid: Number(master[1]), reloads: Number(master[2]), failedReloads: Number(master[3]), workers };
}

/** The master's pid from its pidfile (HAProxy writes it; the kit reads it). */
export const readPid = readPidFile;

/** The arguments of an HAProxy master running `configPath`. */
export const masterOf =
  (configPath: string) =>
  (args: string[]): boolean =>
    args.some((a) => a.includes('haproxy')) && args.includes(configPath);

/**
 * True when `pid` is an HAProxy master running `configPath`: after a reboot the pidfile may name an
 * unrelated process, and a zombie (a master whose parent did not reap it) runs nothing.
 */
export function isMasterOf(pid: number, configPath: string): Promise<boolean> {
  return processAlive(pid, masterOf(configPath));
}

/**
 * Whether `address:port` can be bound now. HAProxy would only find out while reloading, after the
 * configuration was already switched, so the adapter asks first.
 */
export { probeBind, processExists, sleep };

/** Parses `show stat` CSV into rows keyed by column name. */
export function parseShowStat(text: string): Array<Record<string, string>> {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const header = lines.find((l) => l.startsWith('# '));
  if (!header) return [];
  const columns = header.slice(2).split(',');
  return lines
    .filter((l) => !l.startsWith('#'))
    .map((line) => {
      const cells = line.split(',');
      const row: Record<string, string> = {};
      columns.forEach((c, i) => {
        if (c) row[c] = cells[i] ?? '';
      });
      return row;
    });
}
