/**
 * Summarises a V8 `.cpuprofile` (from `npx tsx bench/api.bench.ts --cpu-prof`, or any --cpu-prof):
 * `npx tsx bench/cpu-profile.ts <file.cpuprofile> [top=25] [--requests=N] [--skip=seconds]` (`--skip` leaves out
 * the first seconds, a process's start-up). Prints, as shares of the
 * time the process was busy (idle left out):
 *
 * - the request path **by stage** (auth, rate limit, zod, knex, the PostgreSQL client, cursor
 *   signing, presenters, JSON and the response write, the audit record, request ids, Express and
 *   Node's HTTP, GC): each sample goes to the highest-priority stage found anywhere on its stack, so
 *   the socket writes of a query count as the PostgreSQL client and those of the answer as the
 *   response; with `--requests=N` (the requests the profile covers) also as CPU ms per request;
 * - self time by package / source folder and by function, inclusive time by package (each counted
 *   once per stack) and of the project's own functions.
 *
 * The sampler runs on wall time: on a loaded machine, time the thread spent preempted lands on
 * whatever it was running (often `writev`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
export interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Stages of the request path, highest priority first: a sample goes to the first that matches any frame of its stack. */
export const STAGES: Array<[string, (fn: string, url: string) => boolean]> = [
  [
    'cursor signing',
    (fn, url) => (/^(encode|decode|sign)$/.test(fn) && url.includes('api/pagination')) || (/^(sign|derive)$/.test(fn) && url.includes('common/crypto')),
  ],
  ['auth (credential cache)', (_fn, url) => url.includes('domain/credentials')],
  ['rate limit', (_fn, url) => url.includes('infra/rate-limit') || /applyRateLimit/.test(_fn)],
  ['audit record', (fn, url) => url.includes('infra/audit') || fn === 'recordAuditOnFinish' || (fn === 'record' && url.includes('api/app'))],
  ['request id (ulid)', (fn, url) => url.includes('node_modules/ulid') || fn === 'newUlidId'],
  ['zod validation', (_fn, url) => url.includes('node_modules/zod')],
  [
    'PostgreSQL client (pg, pool, row parsing)',
    (_fn, url) => /node_modules\/(pg|pg-protocol|pg-types|postgres-date|postgres-array|postgres-interval|postgres-bytea|tarn|pg-pool)\//.test(url),
  ],
  ['knex query building', (_fn, url) => url.includes('node_modules/knex/') || url.includes('node_modules/objection/')],
  ['presenters and handler', (_fn, url) => /\/(domain|api\/routes|common)\//.test(url) && !url.includes('node_modules')],
  ['JSON and the response write (res.json)', (fn, url) => (fn === 'json' || fn === 'send') && url.includes('node_modules/express')],
  ['pipeline (api/app.ts)', (_fn, url) => url.includes('/api/app') || url.includes('/api/route')],
  [
    'Express and router',
    (_fn, url) => /node_modules\/(express|router|body-parser|finalhandler|send|statuses|on-finished|type-is|content-type|qs|parseurl|depd)\//.test(url),
  ],
  ['Node HTTP and sockets', (_fn, url) => /^node:(_http|net|internal\/streams|internal\/stream_base|stream|events|internal\/http)/.test(url)],
  ['garbage collection', (fn) => fn === '(garbage collector)'],
];

interface Totals {
  busyUs: number;
  stages: Map<string, number>;
}

export function stageTotals(profile: Profile): Totals {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const stageOf = new Map<number, string>();
  const stages = new Map<string, number>();
  let busyUs = 0;
  for (const [id, us] of selfUs) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    busyUs += us;
    let stage = stageOf.get(id);
    if (!stage) {
      let best = STAGES.length;
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const { functionName, url } = byId.get(cur)!.callFrame;
        for (let i = 0; i < best; i++) if (STAGES[i][1](functionName, url)) best = i;
      }
      stage = best < STAGES.length ? STAGES[best][0] : 'other (V8, timers, native)';
      stageOf.set(id, stage);
    }
    stages.set(stage, (stages.get(stage) ?? 0) + us);
  }
  return { busyUs, stages };
}

/** The stage table as text: share of busy time and, given the request count, CPU ms per request. */
export function stageTable(profile: Profile, requests?: number): string {
  const { busyUs, stages } = stageTotals(profile);
  const lines = [`| Stage | share | CPU ms/request |`, `|---|---:|---:|`];
  for (const [stage, us] of [...stages.entries()].sort((a, b) => b[1] - a[1])) {
    lines.push(`| ${stage} | ${((us / busyUs) * 100).toFixed(1)} % | ${requests ? (us / 1000 / requests).toFixed(4) : '—'} |`);
  }
  lines.push(`| **total busy** | 100 % | ${requests ? (busyUs / 1000 / requests).toFixed(4) : '—'} |`);
  return lines.join('\n');
}

function main() {
  const args = process.argv.slice(2);
  const [file, topArg] = args.filter((a) => !a.startsWith('--'));
  if (!file) {
    console.error('usage: npx tsx bench/cpu-profile.ts <file.cpuprofile> [top] [--requests=N] [--skip=seconds]');
    process.exit(2);
  }
  const requests = Number(args.find((a) => a.startsWith('--requests='))?.slice(11)) || undefined;
  const TOP = Number(topArg ?? 25);
  const profile: Profile = JSON.parse(readFileSync(file, 'utf8'));
  // --skip=S leaves out the first S seconds of samples (a process's start-up: module loading, compiling).
  const skipUs = Number(args.find((a) => a.startsWith('--skip='))?.slice(7) ?? 0) * 1e6;
  if (skipUs > 0) {
    let at = 0;
    profile.timeDeltas = profile.timeDeltas.map((d) => ((at += d) < skipUs ? 0 : d));
  }
  const root = path.resolve(__dirname, '..');

  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

  const where = (url: string): string => {
    if (!url) return '(V8: program, GC, native)';
    const p = url.replace(/^file:\/\//, '');
    const nm = p.lastIndexOf('node_modules/');
    if (nm >= 0) {
      const parts = p.slice(nm + 'node_modules/'.length).split('/');
      return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
    }
    if (p.startsWith('node:')) return p;
    if (p.startsWith(root)) return path.relative(root, p).split('/').slice(0, 2).join('/');
    return p;
  };
  let busy = 0;
  const label = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
  const pct = (us: number) => `${((us / busy) * 100).toFixed(1).padStart(5)} %`;
  const top = (map: Map<string, number>, title: string) => {
    console.log(`\n${title}`);
    for (const [k, v] of [...map.entries()].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${pct(v)}  ${k}`);
  };

  const selfByFunction = new Map<string, number>();
  const selfByPlace = new Map<string, number>();
  const inclusiveOwn = new Map<string, number>();
  const inclusivePlace = new Map<string, number>();
  for (const [id, us] of selfUs) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    busy += us;
    const places = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) places.add(where(byId.get(cur)!.callFrame.url));
    for (const place of places) inclusivePlace.set(place, (inclusivePlace.get(place) ?? 0) + us);
    const n = byId.get(id)!;
    selfByFunction.set(label(n), (selfByFunction.get(label(n)) ?? 0) + us);
    const w = where(n.callFrame.url);
    selfByPlace.set(w, (selfByPlace.get(w) ?? 0) + us);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const c = byId.get(cur)!;
      const url = c.callFrame.url.replace(/^file:\/\//, '');
      if (url.startsWith(root) && !url.includes('node_modules')) {
        const key = label(c);
        if (!seen.has(key)) inclusiveOwn.set(key, (inclusiveOwn.get(key) ?? 0) + us);
        seen.add(key);
      }
    }
  }
  console.log(`${file}: ${(total / 1e6).toFixed(2)} s of samples, ${(busy / 1e6).toFixed(2)} s busy (percentages below are of the busy time)`);
  console.log(`\nthe request path by stage${requests ? ` (${requests} requests)` : ''}\n${stageTable(profile, requests)}`);
  top(selfByPlace, 'self time by package / folder');
  top(selfByFunction, 'self time by function');
  top(inclusivePlace, 'inclusive time by package / folder (a stack counts once per place)');
  top(inclusiveOwn, 'inclusive time of project functions');
}

if (require.main === module) main();
