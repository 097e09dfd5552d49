import { isIP } from 'node:net';
import type { LbListener } from '../lb.provider';

/**
 * Renders a balancer's whole HAProxy configuration from its listener set. Pure: the adapter writes
 * the text, has `haproxy -c` check it and only then reloads. Every line that comes from a listener
 * remembers the listener field it was made of, so a line HAProxy rejects is reported as the
 * customer's field (`listeners.1.backends.0.ip`), not as a line of a file they never see.
 *
 * Values are safe to interpolate because domain/lb/listeners.ts has checked them (names, IP
 * addresses and paths have no spaces, quotes or `#`).
 */
export interface RenderOptions {
  /** The address every listener binds. */
  address: string;
  /** Unix socket for `show stat` (and for handing listening sockets to the next worker on reload). */
  statsSocket: string;
  serviceId: number;
  /**
   * The balancer's own operating-system account: the workers drop to it once the master (root) has
   * bound the listeners, jailed in `chroot`, an empty directory. Absent: the workers keep the
   * master's account (no root to make accounts with, or a balancer made before accounts).
   */
  account?: { name: string; chroot: string };
  /**
   * Backends not to render, by `listener.backend` index, with the reason (written as a comment):
   * their target is refused now (providers/lb.rules.ts backendTargetProblem). The others keep their
   * server names, so stats still map rows to backends by index.
   */
  leaveOut?: ReadonlyMap<string, string>;
}

export interface RenderedConfig {
  text: string;
  /** The listener field each line (1-based line number - 1) was rendered from, or null. */
  paramOfLine: Array<string | null>;
}

/** Proxy and server names inside HAProxy; `show stat` rows are mapped back with them. */
export const proxyName = (listener: string) => `listener-${listener}`;
export const serverName = (index: number) => `b${index}`;
export const listenerOfProxy = (proxy: string) => (proxy.startsWith('listener-') ? proxy.slice('listener-'.length) : null);

/** Health checks mark a backend down after this many failures in a row and up after this many successes. */
export const CHECK_FALL = 2;
export const CHECK_RISE = 2;
/** How long a worker of a previous configuration may finish its connections after a reload or stop. */
export const HARD_STOP_AFTER = '30s';

export function hostPort(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

export function renderConfig(listeners: readonly LbListener[], options: RenderOptions): RenderedConfig {
  const lines: string[] = [];
  const params: Array<string | null> = [];
  const add = (line: string, param: string | null = null) => {
    lines.push(line);
    params.push(param);
  };
  add(`# Load balancer svc_${options.serviceId}. Written whole by the control plane on every change; edits here are lost.`);
  add('global');
  // `expose-fd listeners` lets a reload hand the listening sockets to the new worker: no connection
  // is refused while the old worker lets go of them.
  add(`  stats socket ${options.statsSocket} mode 600 level admin expose-fd listeners`);
  add(`  hard-stop-after ${HARD_STOP_AFTER}`);
  if (options.account) {
    // The master stays root, so a reload can still bind a new port below 1024 and hand it over.
    add(`  user ${options.account.name}`);
    add(`  group ${options.account.name}`);
    add(`  chroot ${options.account.chroot}`);
  }
  add('');
  add('defaults');
  add('  timeout connect 5s');
  add('  timeout client 60s');
  add('  timeout server 60s');
  add('  timeout check 5s');
  // A backend that stops answering before its health check notices gets the connection retried
  // on another backend instead of failing it.
  add('  retries 2');
  add('  option redispatch 1');
  listeners.forEach((listener, i) => {
    const at = (field: string) => `listeners.${i}.${field}`;
    add('');
    add(`listen ${proxyName(listener.name)}`, at('name'));
    add(`  mode ${listener.protocol}`, at('protocol'));
    add(`  bind ${hostPort(options.address, listener.port)}`, at('port'));
    add(`  balance ${listener.algorithm}`, at('algorithm'));
    if (listener.protocol === 'http') add('  option forwardfor', at('protocol'));
    const check = listener.health_check;
    if (check) {
      if (listener.protocol === 'http') {
        add('  option httpchk', at('health_check'));
        add(`  http-check send meth GET uri ${check.path ?? '/'}`, at('health_check.path'));
        add('  http-check expect status 200-399', at('health_check'));
      }
      add(`  default-server inter ${check.interval_seconds}s fall ${CHECK_FALL} rise ${CHECK_RISE}`, at('health_check.interval_seconds'));
    }
    listener.backends.forEach((backend, j) => {
      const refused = options.leaveOut?.get(`${i}.${j}`);
      if (refused !== undefined) add(`  # ${serverName(j)} left out: ${refused.replace(/[\r\n]/g, ' ')}`, at(`backends.${j}.ip`));
      else add(`  server ${serverName(j)} ${hostPort(backend.ip, backend.port)} weight ${backend.weight}${check ? ' check' : ''}`, at(`backends.${j}.ip`));
    });
  });
  add('');
  return { text: lines.join('\n'), paramOfLine: params };
}

/**
 * The customer's field and HAProxy's own words for the first error `haproxy -c` reports, without
 * the file's path (which is ours, not theirs).
 */
export function explainCheckFailure(output: string, rendered: RenderedConfig): { param: string; message: string } {
  const lines = output.split('\n').filter((l) => /\[(ALERT|ERROR)\]/.test(l));
  for (const line of lines) {
    const at = /:(\d+)\]/.exec(line);
    const param = at ? rendered.paramOfLine[Number(at[1]) - 1] : null;
    const message = line
      .replace(/^.*?\[(ALERT|ERROR)\]\s*\(\d+\)\s*:\s*/, '')
      .replace(/^config\s*:\s*/, '')
      .replace(/parsing \[[^\]]*\]\s*:\s*/, '')
      .replace(/\/\S+\/(haproxy\.cfg\S*)/g, 'the configuration')
      .trim();
    if (param) return { param, message: `HAProxy refused the configuration: ${message}` };
  }
  const first = lines[0]
    ?.replace(/^.*?\[(ALERT|ERROR)\]\s*\(\d+\)\s*:\s*/, '')
    .replace(/\/\S+/g, '')
    .trim();
  return { param: 'listeners', message: `HAProxy refused the configuration${first ? `: ${first}` : ''}` };
}
