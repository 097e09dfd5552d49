import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** Runs the real `cloud` bin (cli/bin/cloud.js) as a child process, the way a person or a script does. */
export const CLOUD_BIN = path.resolve(__dirname, '../../cli/bin/cloud.js');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliHome {
  /** A clean environment: its own HOME, config and cache folders, the stack's API URL; no CLOUD_TOKEN. */
  env: Record<string, string>;
  configFile: string;
}

export function cliHome(apiUrl: string): CliHome {
  const home = mkdtempSync(path.join(tmpdir(), 'cloud-cli-'));
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, 'config'),
    XDG_CACHE_HOME: path.join(home, 'cache'),
    CLOUD_API_URL: apiUrl,
    TERM: 'xterm',
  };
  return { env, configFile: path.join(home, 'config', 'cloud', 'config.json') };
}

export function runCli(args: string[], opts: { env: Record<string, string>; input?: string; timeoutMs?: number }): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLOUD_BIN, ...args], { env: opts.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(opts.input ?? '');
  });
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Runs the CLI on a pseudo-terminal (util-linux `script`), so stdin/stderr are a TTY: `answers` are
 * typed when their prompt appears. Returns the terminal transcript (what a person would see).
 */
export function runCliOnTty(
  args: string[],
  opts: { env: Record<string, string>; answers?: Array<{ after: string; type: string }>; redirectStdout?: string; timeoutMs?: number },
): Promise<{ code: number | null; transcript: string }> {
  const command = [process.execPath, CLOUD_BIN, ...args].map(shellQuote).join(' ') + (opts.redirectStdout ? ` > ${shellQuote(opts.redirectStdout)}` : '');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], { env: { ...opts.env, COLUMNS: '100', LINES: '30' }, stdio: ['pipe', 'pipe', 'pipe'] });
    let transcript = '';
    const pending = [...(opts.answers ?? [])];
    let seen = 0;
    const onOutput = (d: Buffer) => {
      transcript += d.toString();
      while (pending.length && transcript.indexOf(pending[0].after, seen) >= 0) {
        seen = transcript.indexOf(pending[0].after, seen) + pending[0].after.length;
        // The prompt has been drawn, so raw mode is on: what is typed now would be echoed only by a bug.
        child.stdin.write(pending.shift()!.type);
      }
    };
    child.stdout.on('data', onOutput);
    child.stderr.on('data', onOutput);
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, transcript });
    });
  });
}
