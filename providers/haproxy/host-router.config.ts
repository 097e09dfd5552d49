import { isIP } from 'node:net';
import { BackendRefusedError } from '../errors';
import { hostPort } from './haproxy.config';

/**
 * What a CaaS host router is (its apps, their Host names and container targets), how it is checked
 * and how it is written as HAProxy's configuration and map file. Pure: providers/haproxy/host-router.ts
 * writes the text, has `haproxy -c` check it and reloads or talks to the runtime API.
 *
 * App ids and host names come from customers (a domain's `host`) and reach configuration lines,
 * map lines and runtime API commands, where a newline, a space, `#` or `;` would start another
 * line, field, comment or command. They are checked here, strictly, before anything is written or
 * sent: nothing else is allowed to reach those lines.
 */

export const ROUTER_BACKEND = 'caas';

/** Where an app's current container listens (its published address: 127.0.0.1:port locally). */
export interface RouteTarget {
  host: string;
  port: number;
}

export type Slot = 's1' | 's2';
export const SLOTS: readonly Slot[] = ['s1', 's2'];

/**
 * One app: its Host names, and two server slots. A switch points the idle slot at the new container
 * and drains the active one, so the backend's stats rows never change and the previous container
 * keeps its slot (disabled) until the next switch reuses it.
 */
export interface AppRoute {
  hosts: string[];
  slots: Record<Slot, RouteTarget | null>;
  /** The slot taking traffic; null while the app has no target (its hosts answer 404). */
  active: Slot | null;
}

/** The router's whole desired state (`apps.json`): the configuration and the map are rendered from it. */
export interface RouterState {
  apps: Record<string, AppRoute>;
}

/** Everything the rendering needs besides the state. */
export interface RouterRenderOptions {
  bindAddress: string;
  port: number;
  statsSocket: string;
  mapFile: string;
  /** The workers' account and empty chroot (only when the control plane is root), as the LB's workers. */
  account?: { name: string; chroot: string };
}

/** App ids as the CaaS family names them (`app_<id>`); they are also HAProxy backend names. */
const APP_ID = /^app_[0-9A-Za-z]{1,60}$/;
/** One DNS label: letters, digits and inner hyphens, lower-case, at most 63 characters. */
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_HOST = 253;
/** A slot without a target still needs an address HAProxy accepts; it is never enabled without one. */
const NO_TARGET: RouteTarget = { host: '127.0.0.1', port: 1 };
/** The answer for an unknown Host and for an app that has nothing running (docs: "nothing running: 404"). */
const NOT_FOUND = 'http-request return status 404 content-type text/plain string "no such app\\n"';
/** The backend of unknown Host names; not a valid app id, so no app can take its name. */
export const NO_APP = 'no_app';
/** How long the previous configuration's worker may finish its connections after a reload or stop. */
const HARD_STOP_AFTER = '30s';

function refused(param: string, message: string): BackendRefusedError {
  return new BackendRefusedError(ROUTER_BACKEND, message, 'validation_failed', param);
}

export function assertAppId(appId: unknown): asserts appId is string {
  if (typeof appId !== 'string' || !APP_ID.test(appId)) throw refused('app_id', 'An app id is app_ followed by 1 to 60 letters or digits.');
}

/** Why `host` is not a routable host name, or null. Lower-case only: the router lower-cases the header, not the map. */
export function hostProblem(host: unknown): string | null {
  if (typeof host !== 'string' || host === '') return 'A host name is required.';
  if (host.length > MAX_HOST) return `A host name has at most ${MAX_HOST} characters.`;
  if (!host.split('.').every((label) => LABEL.test(label))) {
    return 'A host name is dot-separated labels of lower-case letters, digits and inner hyphens (no port, scheme, space or wildcard).';
  }
  return null;
}

/** The host names, each checked, without duplicates, sorted (so equal sets compare equal). */
export function checkedHosts(hosts: unknown): string[] {
  if (!Array.isArray(hosts)) throw refused('hosts', 'The host names are a list.');
  hosts.forEach((host, i) => {
    const problem = hostProblem(host);
    if (problem) throw refused(`hosts.${i}`, problem);
  });
  return [...new Set(hosts as string[])].sort();
}

/** A target is an IP literal and a TCP port: it is written as a server line and sent to the runtime API. */
export function assertTarget(target: unknown, param = 'target'): asserts target is RouteTarget {
  const t = target as Partial<RouteTarget> | null;
  if (!t || typeof t.host !== 'string' || isIP(t.host) === 0) throw refused(`${param}.host`, 'A target host is an IP address.');
  if (!Number.isInteger(t.port) || (t.port as number) < 1 || (t.port as number) > 65535) throw refused(`${param}.port`, 'A target port is 1 to 65535.');
}

export const sameTarget = (a: RouteTarget | null, b: RouteTarget | null): boolean =>
  a === null ? b === null : b !== null && a.host === b.host && a.port === b.port;

export const activeTarget = (app: AppRoute): RouteTarget | null => (app.active ? app.slots[app.active] : null);

/** The app another app's host name already routes to, if any: a host routes to one app only. */
export function ownerOf(state: RouterState, host: string): string | null {
  return Object.entries(state.apps).find(([, app]) => app.hosts.includes(host))?.[0] ?? null;
}

/** `hosts.map`: one `<host> <app id>` line per host name, what the frontend's `map()` looks the Host header up in. */
export function renderMap(state: RouterState): string {
  const lines = ['# CaaS host router: Host name -> app. Written by the control plane; edits here are lost.'];
  for (const [appId, app] of Object.entries(state.apps).sort(([a], [b]) => a.localeCompare(b))) {
    for (const host of app.hosts) lines.push(`${host} ${appId}`);
  }
  return `${lines.join('\n')}\n`;
}

/** Host names per app, from a map file's text. */
export function parseMap(text: string): Record<string, string[]> {
  const routes: Record<string, string[]> = {};
  for (const line of text.split('\n')) {
    const [host, appId] = line.trim().split(/\s+/);
    if (!host || host.startsWith('#') || !appId) continue;
    (routes[appId] ??= []).push(host);
  }
  return routes;
}

/** The router's whole HAProxy configuration. */
export function renderRouterConfig(state: RouterState, options: RouterRenderOptions): string {
  const lines = [
    '# CaaS host router. Written whole by the control plane on every change; edits here are lost.',
    ...globalSection(options),
    '',
    ...defaultsSection(),
    '',
    'frontend ingress',
    `  bind ${hostPort(options.bindAddress, options.port)}`,
    // The Host header's port is ignored; an unknown name gets the map's default, the 404 backend.
    `  use_backend %[req.hdr(host),field(1,:),lower,map(${options.mapFile},${NO_APP})]`,
    `  default_backend ${NO_APP}`,
    '',
    `backend ${NO_APP}`,
    `  ${NOT_FOUND}`,
  ];
  for (const [appId, app] of Object.entries(state.apps).sort(([a], [b]) => a.localeCompare(b))) lines.push('', ...appBackend(appId, app));
  return `${lines.join('\n')}\n`;
}

function globalSection(options: RouterRenderOptions): string[] {
  const lines = [
    'global',
    // `expose-fd listeners`: a reload hands the listening socket to the new worker, so no connection
    // is refused while the old one lets go of it. `level admin`: the switch's `set server` commands.
    `  stats socket ${options.statsSocket} mode 600 level admin expose-fd listeners`,
    `  hard-stop-after ${HARD_STOP_AFTER}`,
    // One router per service on a shared host: a couple of threads, not one per core of the machine.
    '  nbthread 2',
  ];
  if (options.account) {
    // The master stays root (it binds on every reload); the workers carrying traffic drop to the account.
    lines.push(`  user ${options.account.name}`, `  group ${options.account.name}`, `  chroot ${options.account.chroot}`);
  }
  return lines;
}

function defaultsSection(): string[] {
  return [
    'defaults',
    '  mode http',
    '  option forwardfor',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  timeout http-request 10s',
    '  timeout http-keep-alive 10s',
    '  timeout queue 10s',
    '  timeout check 3s',
    // A request whose connection fails (racing a switch, a container just gone) is tried again, on
    // the other slot when it is up.
    '  retries 3',
    '  option redispatch 1',
  ];
}

/**
 * One app's backend: 404 while no slot is usable (no target, or its container is down), light TCP
 * checks, and both slots always present (the idle one `disabled`, keeping its last address).
 */
function appBackend(appId: string, app: AppRoute): string[] {
  const lines = [`backend ${appId}`, `  ${NOT_FOUND} if { nbsrv eq 0 }`, '  default-server inter 2s fall 2 rise 1'];
  for (const slot of SLOTS) {
    const target = app.slots[slot] ?? NO_TARGET;
    lines.push(`  server ${slot} ${hostPort(target.host, target.port)} check${app.active === slot ? '' : ' disabled'}`);
  }
  return lines;
}
