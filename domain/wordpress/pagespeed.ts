import { existsSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContextOptions, CDPSession, LaunchOptions } from 'playwright-core';
import { createLogger } from '../../common/logger';
import { findBinary } from '../../providers/local-server';
import { accountNameFor, ensureAccount, type OsAccount } from '../../providers/os-accounts';
import { DomainError } from '../errors';

/**
 * The live page-speed test of a hosted WordPress site (SPEC "Hosted sites",
 * `GET /v1/wordpress/{id}/monitoring/pagespeed`; DECISIONS "Hosted WordPress": `{mobile, desktop}`,
 * each an object of numbers). Lighthouse itself is not run: headless Chromium (CHROMIUM_PATH, default
 * /usr/bin/chromium, through playwright-core) loads the page once per form factor and the browser's
 * own performance entries give the metrics; the score applies Lighthouse 10's published scoring.
 *
 * Form factors, each in a fresh browser context (cold HTTP cache, no open connections):
 * - mobile: 412x823 viewport, deviceScaleFactor 2.625, touch, an Android Chrome user agent, CPU
 *   slowed 4x (CDP Emulation.setCPUThrottlingRate) and Lighthouse's "Slow 4G" (150 ms RTT, 1.6 Mbps
 *   down, 750 kbps up) as Lighthouse applies it when the browser throttles (its "devtools" method,
 *   CDP Network.emulateNetworkConditions): 562.5 ms per request (150 ms x 3.75) and 90 % of the
 *   throughput (1474.56 kbps down, 675 kbps up), since Chromium throttles per request, not per packet.
 * - desktop: 1350x940, deviceScaleFactor 1, a desktop Chrome user agent, no throttling.
 * Each load waits for the `load` event, then SETTLE_MS for late LCP and layout shifts.
 *
 * Metrics (milliseconds from the start of the navigation, rounded; the run's performance timeline):
 * - ttfb_ms: the first byte of the page's HTML: Navigation Timing `responseStart`, or later when the
 *   emulated network delivers the headers later (CDP's `receiveHeadersEnd`; Chromium's throttle
 *   delays the response after the point Navigation Timing records).
 * - fcp_ms: First Contentful Paint (paint timing). A page that paints nothing has no result.
 * - lcp_ms: Largest Contentful Paint (the last `largest-contentful-paint` entry; never below FCP).
 * - cls: Cumulative Layout Shift, as the Core Web Vital: the largest session window (shifts less
 *   than 1 s apart, at most 5 s long) of `layout-shift` entries without recent input.
 * - tbt_ms: Total Blocking Time: for every long task (`longtask` observer, registered before the
 *   page's own scripts), the part beyond its first 50 ms that lies between FCP and the end of `load`.
 * - dom_content_loaded_ms, load_ms: the end of the DOMContentLoaded and load events.
 * - transfer_bytes, requests: network requests of the page that finished (the HTML included, data:
 *   and blob: URLs excluded) until the metrics are read, and their bytes on the wire (headers and
 *   encoded bodies, CDP `encodedDataLength`).
 * - score: 0-100, Lighthouse 10's performance score without Speed Index (no filmstrip here): each
 *   metric's score on its log-normal curve (p10 and median of Lighthouse 10, per form factor; see
 *   CURVES), rounded to two decimals as Lighthouse does, then averaged with Lighthouse 10's weights
 *   FCP 10, LCP 25, TBT 30, CLS 25 (Speed Index's 10 dropped, so out of 90), rounded to an integer.
 *
 * Network: Chromium resolves the site's own host name to the target address and port
 * (`--host-resolver-rules`), so it sends the site's `Host` and the page's own links to
 * `http://<host>/...` reach the site; every other name and address resolves to nothing. Third-party
 * resources therefore fail fast and are not measured, and a customer's page cannot make the platform's
 * browser call into the platform's own network.
 *
 * Time and load: one Chromium per call. Measurements run one at a time per process (a queue), so a
 * throttled load does not compete with another for the 2 cores. `timeoutMs` (default 30 s, SPEC's
 * upper bound) covers the wait in that queue too: a caller never waits longer; when it runs out the
 * browser is closed and PageSpeedUnavailable (`timeout`, or `busy` while still queued) is thrown.
 *
 * Fairness: at most one measurement per site (target host and URL) is queued or running. A second
 * call for the same site while one is joins it and answers its result (or its error); when its own
 * `timeoutMs` runs out first it gets `busy`. One customer pressing the button (or a script calling
 * the endpoint in a loop) therefore holds at most one place per site in the queue, and a site's
 * result is measured once for all its concurrent callers.
 *
 * Privileges: tenant pages are hostile input to a browser. Run as root (the API on a real host),
 * Chromium runs as an unprivileged system account of its own (`cwp-pagespeed-<hash>`, made on first
 * use, `accountNameFor('wp', accountRoot, 'pagespeed')`): Playwright starts a small wrapper script
 * (root's, 0755, in a 0700 temporary directory of root's, removed after the run) that hands the
 * run's fresh profile directory (Playwright's `--user-data-dir`) to that account, points HOME and
 * the XDG directories into it, and execs Chromium through `setpriv --reuid --regid --clear-groups
 * --inh-caps=-all`. Chromium then gets a minimal environment (PATH, LANG), never the API's. With
 * its privileges dropped, Chromium's own sandbox works (Debian's Chromium uses unprivileged user
 * namespaces plus seccomp-bpf; no setuid helper): `--no-sandbox` is left out. Should the sandbox not
 * start on a machine (user namespaces disabled), the browser is started again without it, still as
 * the unprivileged account, and that is logged once. Not root (a developer's checkout): Chromium
 * runs as this process's account with `--no-sandbox`, as before.
 */

export interface PageSpeedResult {
  score: number;
  ttfb_ms: number;
  fcp_ms: number;
  lcp_ms: number;
  cls: number;
  tbt_ms: number;
  dom_content_loaded_ms: number;
  load_ms: number;
  transfer_bytes: number;
  requests: number;
}

export interface PageSpeedReport {
  mobile: PageSpeedResult;
  desktop: PageSpeedResult;
}

export type FormFactor = keyof PageSpeedReport;

export interface PageSpeedTarget {
  /** Where the site answers, e.g. http://127.0.0.1:8088/ (its path is the page measured). */
  url: string;
  /** The site's host name, sent as `Host`, e.g. blog.example.test. */
  host: string;
}

export interface PageSpeedOptions {
  /** Hard limit of the whole call, queue wait included (default 30 000). */
  timeoutMs?: number;
  /** Loads per form factor, 1 to 5 (default 1); the run with the median score is reported. */
  runs?: number;
  chromiumPath?: string;
  /** The stable directory the browser's account name is derived from (default os.tmpdir()). */
  accountRoot?: string;
}

export type PageSpeedFailure = 'unreachable' | 'error_status' | 'no_content' | 'timeout' | 'busy';

/** The test could not produce a result; the message is safe to show the customer (503 backend_unavailable). */
export class PageSpeedUnavailable extends DomainError {
  constructor(
    readonly reason: PageSpeedFailure,
    message: string,
  ) {
    super(503, 'api_error', 'backend_unavailable', message);
    this.name = 'PageSpeedUnavailable';
  }
}

export const DEFAULT_TIMEOUT_MS = 30_000;
/** After `load`: time for the last LCP candidate and late layout shifts. */
export const SETTLE_MS = 1_500;
const BLOCKING_THRESHOLD_MS = 50;

/** Lighthouse 10 scoring curves ({p10, median}: score 0.9 at p10, 0.5 at the median) and weights. */
export const CURVES: Record<FormFactor, Record<'fcp' | 'lcp' | 'tbt' | 'cls', { p10: number; median: number }>> = {
  mobile: { fcp: { p10: 1800, median: 3000 }, lcp: { p10: 2500, median: 4000 }, tbt: { p10: 200, median: 600 }, cls: { p10: 0.1, median: 0.25 } },
  desktop: { fcp: { p10: 934, median: 1600 }, lcp: { p10: 1200, median: 2400 }, tbt: { p10: 150, median: 350 }, cls: { p10: 0.1, median: 0.25 } },
};
export const WEIGHTS = { fcp: 10, lcp: 25, tbt: 30, cls: 25 } as const;

interface Profile {
  context: BrowserContextOptions;
  cpuSlowdown: number;
  /** CDP Network.emulateNetworkConditions values (ms, bytes per second), or none. */
  network: { latency: number; downloadThroughput: number; uploadThroughput: number } | null;
}

const KBPS = 1024 / 8;

function profiles(chromeMajor: string): Record<FormFactor, Profile> {
  return {
    mobile: {
      context: {
        viewport: { width: 412, height: 823 },
        screen: { width: 412, height: 823 },
        deviceScaleFactor: 2.625,
        isMobile: true,
        hasTouch: true,
        userAgent: `Mozilla/5.0 (Linux; Android 11; moto g power (2022)) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${chromeMajor}.0.0.0 Mobile Safari/537.36`,
      },
      cpuSlowdown: 4,
      network: { latency: 150 * 3.75, downloadThroughput: 1.6 * 1024 * 0.9 * KBPS, uploadThroughput: 750 * 0.9 * KBPS },
    },
    desktop: {
      context: {
        viewport: { width: 1350, height: 940 },
        screen: { width: 1350, height: 940 },
        deviceScaleFactor: 1,
        isMobile: false,
        hasTouch: false,
        userAgent: `Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${chromeMajor}.0.0.0 Safari/537.36`,
      },
      cpuSlowdown: 1,
      network: null,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Scoring (Lighthouse's shared/statistics.js: a log-normal curve with exact range boundaries)

/** Abramowitz and Stegun 7.1.26, as Lighthouse uses it. */
function erf(x: number): number {
  const sign = Math.sign(x);
  const ax = Math.abs(x);
  const t = 1 / (1 + 0.3275911 * ax);
  const y = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign * (1 - y * Math.exp(-ax * ax));
}

/** 1 at 0, 0.9 at p10, 0.5 at the median, towards 0 beyond; the ranges are clamped as Lighthouse does. */
export function logNormalScore({ p10, median }: { p10: number; median: number }, value: number): number {
  if (value <= 0) return 1;
  const INVERSE_ERFC_ONE_FIFTH = 0.9061938024368232;
  const standardized = (Math.log(value / median) * INVERSE_ERFC_ONE_FIFTH) / -Math.log(p10 / median);
  const score = (1 - erf(standardized)) / 2;
  if (value <= p10) return Math.max(0.9, Math.min(1, score));
  if (value <= median) return Math.max(0.5, Math.min(0.8999999999999999, score));
  return Math.max(0, Math.min(0.4999999999999999, score));
}

/** The 0-100 score of one form factor's metrics (see the module comment). */
export function performanceScore(formFactor: FormFactor, m: { fcp_ms: number; lcp_ms: number; tbt_ms: number; cls: number }): number {
  const curves = CURVES[formFactor];
  const values = { fcp: m.fcp_ms, lcp: m.lcp_ms, tbt: m.tbt_ms, cls: m.cls };
  let sum = 0;
  let weights = 0;
  for (const key of Object.keys(WEIGHTS) as (keyof typeof WEIGHTS)[]) {
    sum += WEIGHTS[key] * (Math.round(logNormalScore(curves[key], values[key]) * 100) / 100);
    weights += WEIGHTS[key];
  }
  return Math.round((sum / weights) * 100);
}

// ---------------------------------------------------------------------------------------------
// In the page

const COLLECTOR = '__cloudPageSpeed';

/** Runs before the page's own scripts: long tasks are only seen by an observer that is already there. */
const INIT_SCRIPT = `(() => {
  const store = { longtasks: [], shifts: [], lcp: 0 };
  Object.defineProperty(window, '${COLLECTOR}', { value: store, enumerable: false });
  const watch = (type, fn) => {
    try { new PerformanceObserver((list) => list.getEntries().forEach(fn)).observe({ type, buffered: true }); } catch {}
  };
  watch('longtask', (e) => store.longtasks.push([e.startTime, e.duration]));
  watch('layout-shift', (e) => { if (!e.hadRecentInput) store.shifts.push([e.startTime, e.value]); });
  watch('largest-contentful-paint', (e) => { store.lcp = e.startTime; });
})();`;

interface PageTimings {
  requestStart: number;
  responseStart: number;
  domContentLoaded: number;
  load: number;
  fcp: number | null;
  lcp: number;
  longtasks: [number, number][];
  shifts: [number, number][];
}

/**
 * Serialised into the page by page.evaluate: no closures over this module, and the browser's types
 * spelled out (the project compiles without the DOM library).
 */
function readTimings(collector: string): PageTimings {
  const page = globalThis as unknown as {
    performance: { getEntriesByType(type: string): Record<string, number>[]; getEntriesByName(name: string): { startTime: number }[] };
  } & Record<string, { longtasks: [number, number][]; shifts: [number, number][]; lcp: number } | undefined>;
  const nav = page.performance.getEntriesByType('navigation')[0] as Record<string, number> | undefined;
  const fcp = page.performance.getEntriesByName('first-contentful-paint')[0];
  const store = page[collector];
  return {
    requestStart: nav?.requestStart ?? 0,
    responseStart: nav?.responseStart ?? 0,
    domContentLoaded: nav?.domContentLoadedEventEnd ?? 0,
    load: nav?.loadEventEnd ?? 0,
    fcp: fcp ? fcp.startTime : null,
    lcp: store?.lcp ?? 0,
    longtasks: store?.longtasks ?? [],
    shifts: store?.shifts ?? [],
  };
}

/** The Core Web Vital: the largest session window of shifts (gaps under 1 s, windows up to 5 s). */
export function cumulativeLayoutShift(shifts: [start: number, value: number][]): number {
  let max = 0;
  let current = 0;
  let first = -Infinity;
  let last = -Infinity;
  for (const [start, value] of [...shifts].sort((a, b) => a[0] - b[0])) {
    if (start - last < 1000 && start - first < 5000) {
      current += value;
    } else {
      current = value;
      first = start;
    }
    last = start;
    max = Math.max(max, current);
  }
  return max;
}

/** The blocking part (beyond 50 ms) of each long task, clipped to [from, to]. */
export function totalBlockingTime(tasks: [start: number, duration: number][], from: number, to: number): number {
  let total = 0;
  for (const [start, duration] of tasks) {
    total += Math.max(0, Math.min(start + duration, to) - Math.max(start + BLOCKING_THRESHOLD_MS, from));
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// The measurement

/** Chromium only knows the site's host, at the target's address and port (see the module comment). */
function resolverRules(host: string, target: URL): string {
  const port = target.port || (target.protocol === 'https:' ? '443' : '80');
  return `MAP ${host} ${target.hostname}:${port}, MAP * ~NOTFOUND`;
}

const HOST_NAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;

let queue: Promise<void> = Promise.resolve();
/** The measurement queued or running per site (module comment: fairness). */
const inFlight = new Map<string, Promise<PageSpeedReport>>();

/**
 * Mobile and desktop page speed of the site `target.host` served at `target.url` (module comment:
 * form factors, metrics, score, network, time limits, fairness, privileges). Throws
 * PageSpeedUnavailable when the site cannot be measured, with a message for the customer.
 */
export async function measurePageSpeed(target: PageSpeedTarget, opts: PageSpeedOptions = {}): Promise<PageSpeedReport> {
  const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  const runs = Math.min(5, Math.max(1, Math.floor(opts.runs ?? 1)));
  const url = new URL(target.url);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`pagespeed: unsupported URL ${target.url}`);
  if (!HOST_NAME.test(target.host)) throw new TypeError(`pagespeed: invalid host name ${JSON.stringify(target.host)}`);
  const chromiumPath = opts.chromiumPath ?? process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(chromiumPath)) {
    throw new Error(`pagespeed: no Chromium at ${chromiumPath}; install it (scripts/install/chromium.sh) or set CHROMIUM_PATH`);
  }

  const key = `${target.host.toLowerCase()} ${url.href}`;
  const running = inFlight.get(key);
  if (running) return joinBeforeDeadline(running, target.host, deadline);
  const mine = queued(() => measure(target, url, runs, chromiumPath, deadline, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, opts.accountRoot), deadline);
  inFlight.set(key, mine);
  const forget = () => {
    if (inFlight.get(key) === mine) inFlight.delete(key);
  };
  mine.then(forget, forget);
  return mine;
}

/** Runs `fn` once the measurement before it is done (or throws `busy` at the deadline, keeping the order). */
async function queued<T>(fn: () => Promise<T>, deadline: number): Promise<T> {
  // Leaving early (busy) keeps the order: the next call still waits for the one before this.
  let release!: () => void;
  const mine = new Promise<void>((resolve) => (release = resolve));
  const previous = queue;
  queue = previous.then(() => mine);
  try {
    await beforeDeadline(previous, deadline);
    return await fn();
  } finally {
    release();
  }
}

/** The result of the site's measurement already queued or running, or `busy` when `deadline` comes first. */
async function joinBeforeDeadline(running: Promise<PageSpeedReport>, host: string, deadline: number): Promise<PageSpeedReport> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      running,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new PageSpeedUnavailable('busy', `A page-speed test of ${host} is already running; try again in a minute.`)),
          Math.max(0, deadline - Date.now()),
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function beforeDeadline(previous: Promise<void>, deadline: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      previous,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new PageSpeedUnavailable('busy', 'Another page-speed test is running; try again in a minute.')),
          Math.max(0, deadline - Date.now()),
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function measure(
  target: PageSpeedTarget,
  url: URL,
  runs: number,
  chromiumPath: string,
  deadline: number,
  timeoutMs: number,
  accountRoot: string | undefined,
): Promise<PageSpeedReport> {
  // Loaded here, not at import: the API process pays for it only when a test runs.
  const { chromium } = await import('playwright-core');
  const timeoutError = () =>
    new PageSpeedUnavailable(
      'timeout',
      `The page-speed test of ${target.host} did not finish within ${Math.round(timeoutMs / 1000)} s; the page took too long to load.`,
    );
  const remaining = () => Math.max(1, deadline - Date.now());

  let browser: Browser | undefined;
  let timedOut = false;
  let wrapperDir: string | null = null;
  const timer = setTimeout(() => {
    timedOut = true;
    void browser?.close().catch(() => undefined);
  }, remaining());
  try {
    const args = [
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-extensions',
      '--disable-renderer-backgrounding',
      '--disable-background-timer-throttling',
      `--host-resolver-rules=${resolverRules(target.host, url)}`,
    ];
    const launch = (options: LaunchOptions) => chromium.launch({ headless: true, timeout: remaining(), args, ...options });
    if (process.getuid?.() !== 0) {
      browser = await launch({ executablePath: chromiumPath, args: ['--no-sandbox', ...args] });
    } else {
      // Root: Chromium as the page-speed account (module comment: privileges).
      const account = await pageSpeedAccount(accountRoot ?? os.tmpdir());
      wrapperDir = await fs.mkdtemp(path.join(os.tmpdir(), 'cloud-pagespeed-'));
      const wrapper = path.join(wrapperDir, 'chromium');
      await fs.writeFile(wrapper, wrapperScript(account, chromiumPath), { mode: 0o755, flag: 'wx' });
      const unprivileged = { executablePath: wrapper, env: browserEnv() };
      if (sandbox) {
        browser = await launch({ ...unprivileged, chromiumSandbox: true }).catch((err: unknown) => {
          // Chromium's own words when neither user namespaces nor a setuid helper are available.
          if (timedOut || !/No usable sandbox/i.test(String((err as Error).message))) throw err;
          sandbox = false;
          log.warn(
            { err: String((err as Error).message).slice(0, 500) },
            "Chromium's sandbox does not start here: page-speed tests run without it (still unprivileged)",
          );
          return undefined;
        });
      }
      browser ??= await launch({ ...unprivileged, args: ['--no-sandbox', ...args] });
    }
    if (timedOut) throw timeoutError();
    const forms = profiles(browser.version().split('.')[0]);
    const page = new URL(url.pathname + url.search, `${url.protocol}//${target.host}`).toString();
    const report = {} as PageSpeedReport;
    for (const formFactor of ['mobile', 'desktop'] as const) {
      const results: PageSpeedResult[] = [];
      for (let i = 0; i < runs; i++) results.push(await loadOnce(browser, formFactor, forms[formFactor], page, target.host, remaining));
      results.sort((a, b) => a.score - b.score);
      report[formFactor] = results[Math.floor((results.length - 1) / 2)];
    }
    return report;
  } catch (err) {
    // Our timer closed the browser under a pending call, or Playwright's own limit (the same deadline) struck first.
    if (timedOut || (err instanceof Error && err.name === 'TimeoutError')) throw timeoutError();
    throw err;
  } finally {
    clearTimeout(timer);
    await browser?.close().catch(() => undefined);
    if (wrapperDir) await fs.rm(wrapperDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Privileges (module comment)

const log = createLogger(undefined, 'pagespeed');
/** Whether Chromium's own sandbox is used when it runs unprivileged (false once it failed to start here). */
let sandbox = true;
let browserAccount: { root: string; made: Promise<OsAccount> } | null = null;

/** Whether the last unprivileged launch used Chromium's sandbox (what a test checks the renderers for). */
export const pageSpeedSandboxed = (): boolean => sandbox;

/** The page-speed browser's system account, made on first use (one per process and anchor). */
export function pageSpeedAccount(root: string): Promise<OsAccount> {
  if (browserAccount?.root !== root) {
    const made = ensureAccount(accountNameFor('wp', root, 'pagespeed'), { purpose: 'WordPress page-speed browser', dataDir: root });
    browserAccount = { root, made };
    made.catch(() => {
      if (browserAccount?.made === made) browserAccount = null;
    });
  }
  return browserAccount.made;
}

/** The browser's environment: nothing of the API's (its database URL, keys). */
function browserEnv(): Record<string, string> {
  return { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: process.env.LANG ?? 'C.UTF-8', ...(process.env.TZ ? { TZ: process.env.TZ } : {}) };
}

/**
 * The wrapper Playwright starts as the browser: hands Playwright's fresh profile directory (root's,
 * 0700, empty) to the account and execs Chromium as it. Only numbers and a checked path go in.
 */
function wrapperScript(as: OsAccount, chromiumPath: string): string {
  const setpriv = findBinary('setpriv');
  if (!setpriv) throw new Error('pagespeed: setpriv is missing (util-linux); it runs Chromium without root');
  if (!path.isAbsolute(chromiumPath) || !/^[A-Za-z0-9/._+-]+$/.test(chromiumPath)) throw new Error(`pagespeed: unusable Chromium path ${chromiumPath}`);
  const [uid, gid] = [as.uid, as.gid].map((n) => {
    if (!Number.isInteger(n) || n <= 0) throw new Error(`pagespeed: refusing to run Chromium as id ${n}`);
    return String(n);
  });
  return [
    '#!/bin/sh',
    '# Written by domain/wordpress/pagespeed.ts: Chromium as the page-speed account, never as root.',
    'set -e',
    'profile=',
    'for arg in "$@"; do',
    '  case "$arg" in --user-data-dir=*) profile="${arg#--user-data-dir=}" ;; esac',
    'done',
    'case "$profile" in /*) ;; *) echo "pagespeed wrapper: no --user-data-dir" >&2; exit 2 ;; esac',
    `chown -R -h ${uid}:${gid} -- "$profile"`,
    'cd /',
    'HOME="$profile" XDG_CONFIG_HOME="$profile/.config" XDG_CACHE_HOME="$profile/.cache"',
    'export HOME XDG_CONFIG_HOME XDG_CACHE_HOME',
    `exec ${setpriv} --reuid=${uid} --regid=${gid} --clear-groups --inh-caps=-all -- ${chromiumPath} "$@"`,
    '',
  ].join('\n');
}

async function loadOnce(
  browser: Browser,
  formFactor: FormFactor,
  profile: Profile,
  pageUrl: string,
  host: string,
  remaining: () => number,
): Promise<PageSpeedResult> {
  const context = await browser.newContext({ ...profile.context, ignoreHTTPSErrors: true, serviceWorkers: 'block' });
  try {
    await context.addInitScript(INIT_SCRIPT);
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    const { frameTree } = await cdp.send('Page.getFrameTree');
    const network = recordNetwork(cdp, frameTree.frame.id);
    await cdp.send('Network.enable');
    if (profile.network) await cdp.send('Network.emulateNetworkConditions', { offline: false, ...profile.network });
    if (profile.cpuSlowdown !== 1) await cdp.send('Emulation.setCPUThrottlingRate', { rate: profile.cpuSlowdown });

    let response;
    try {
      response = await page.goto(pageUrl, { waitUntil: 'load', timeout: remaining() });
    } catch (err) {
      const code = /net::(ERR_[A-Z_]+)/.exec((err as Error).message)?.[1];
      if (code)
        throw new PageSpeedUnavailable('unreachable', `The site ${host} could not be reached for the page-speed test (${code}); check that it is running.`);
      throw err;
    }
    if (!response) throw new PageSpeedUnavailable('unreachable', `The site ${host} sent no page to the page-speed test.`);
    if (response.status() >= 400) {
      throw new PageSpeedUnavailable(
        'error_status',
        `The site ${host} answered the page-speed test with HTTP ${response.status()}; it needs a page that loads.`,
      );
    }
    await page.waitForTimeout(Math.min(SETTLE_MS, Math.max(0, remaining() - 1_000)));
    const t = await page.evaluate(readTimings, COLLECTOR);
    if (t.fcp === null) throw new PageSpeedUnavailable('no_content', `The page of ${host} showed no content, so its speed cannot be measured.`);

    const metrics = {
      // Chromium's throttle holds the response back after Navigation Timing's responseStart: the
      // headers' time on the emulated network, when CDP has it, is the first byte the page got.
      ttfb_ms: Math.round(Math.max(t.responseStart, network.documentHeadersMs === null ? 0 : t.requestStart + network.documentHeadersMs)),
      fcp_ms: Math.round(t.fcp),
      lcp_ms: Math.round(Math.max(t.lcp, t.fcp)),
      cls: Math.round(cumulativeLayoutShift(t.shifts) * 10_000) / 10_000,
      tbt_ms: Math.round(totalBlockingTime(t.longtasks, t.fcp, t.load || Infinity)),
      dom_content_loaded_ms: Math.round(t.domContentLoaded),
      load_ms: Math.round(t.load),
      transfer_bytes: Math.round(network.bytes),
      requests: network.requests,
    };
    return { score: performanceScore(formFactor, metrics), ...metrics };
  } finally {
    await context.close().catch(() => undefined);
  }
}

interface NetworkRecord {
  requests: number;
  bytes: number;
  /** The page's HTML as the (throttled) network delivered it: ms from sending the request to its headers. */
  documentHeadersMs: number | null;
}

/** Finished requests of the page and their bytes on the wire, from CDP's Network domain. */
function recordNetwork(cdp: CDPSession, mainFrame: string): NetworkRecord {
  const counted = new Set<string>();
  const skipped = new Set<string>();
  const totals: NetworkRecord = { requests: 0, bytes: 0, documentHeadersMs: null };
  cdp.on('Network.responseReceived', (e) => {
    const timing = e.response.timing;
    // The last one wins: after redirects, the page's own HTML.
    if (e.type === 'Document' && e.frameId === mainFrame && timing) totals.documentHeadersMs = timing.receiveHeadersEnd - timing.sendStart;
  });
  cdp.on('Network.requestWillBeSent', (e) => {
    if (/^(data|blob):/.test(e.request.url)) skipped.add(e.requestId);
  });
  cdp.on('Network.loadingFinished', (e) => {
    if (skipped.has(e.requestId) || counted.has(e.requestId)) return;
    counted.add(e.requestId);
    totals.requests++;
    totals.bytes += e.encodedDataLength;
  });
  return totals;
}
