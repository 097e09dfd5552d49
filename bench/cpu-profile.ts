/**
 * Summarises a V8 `.cpuprofile` (from `npx tsx bench/api.bench.ts --cpu-prof`):
 * `npx tsx bench/cpu-profile.ts <file.cpuprofile> [top=25]`. Prints, as shares of the time the
 * process was busy (idle left out), self time by package / source folder and by function, inclusive
 * time by package (each counted once per stack) and of the project's own functions, so that the
 * cost of the request path can be named. The sampler runs on wall time: on a loaded machine, time
 * the thread spent preempted lands on whatever it was running (often `writev`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: npx tsx bench/cpu-profile.ts <file.cpuprofile> [top]');
  process.exit(2);
}
const TOP = Number(topArg ?? 25);
const profile: Profile = JSON.parse(readFileSync(file, 'utf8'));
const root = path.resolve(__dirname, '..');

// Self time per node from the samples and their time deltas (microseconds).
const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

function where(url: string): string {
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
}
let busy = 0;
const label = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
const pct = (us: number) => `${((us / busy) * 100).toFixed(1).padStart(5)} %`;

function top(map: Map<string, number>, title: string) {
  console.log(`\n${title}`);
  for (const [k, v] of [...map.entries()].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${pct(v)}  ${k}`);
}

const selfByFunction = new Map<string, number>();
const selfByPlace = new Map<string, number>();
const inclusiveOwn = new Map<string, number>();
const inclusivePlace = new Map<string, number>();
for (const [id, us] of selfUs) {
  // Idle time is left out: the percentages are of the time the process was busy.
  if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
  busy += us;
  // Inclusive time per package / folder: each counted once per sample.
  const places = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) places.add(where(byId.get(cur)!.callFrame.url));
  for (const place of places) inclusivePlace.set(place, (inclusivePlace.get(place) ?? 0) + us);
  const n = byId.get(id)!;
  selfByFunction.set(label(n), (selfByFunction.get(label(n)) ?? 0) + us);
  const w = where(n.callFrame.url);
  selfByPlace.set(w, (selfByPlace.get(w) ?? 0) + us);
  // Inclusive time of our own functions: walk up the stack, counting each function once per sample.
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
top(selfByPlace, 'self time by package / folder');
top(selfByFunction, 'self time by function');
top(inclusivePlace, 'inclusive time by package / folder (a stack counts once per place)');
top(inclusiveOwn, 'inclusive time of project functions');
