/**
 * CPU accounting from /proc for the benchmarks: per process group (the bench's own processes, its
 * PostgreSQL backends, its Temporal server) and the whole machine, so that the load of other
 * processes shows ("others") and CPU time per request or delivery can be reported: it is far less
 * disturbed by a loaded machine than requests per second are.
 */
import { readFileSync, readdirSync } from 'node:fs';

const TICK = 100; // USER_HZ on Linux

export function procCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICK; // utime + stime
  } catch {
    return 0;
  }
}

export function machineBusySeconds(): number {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = cpu;
  return (user + nice + system + irq + softirq + steal) / TICK;
}

/** Our own child processes of that name (other sessions on the machine may run the same programs). */
export function childPidsByName(name: string, parent = process.pid): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parent && readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) pids.push(Number(entry));
    } catch {
      // gone
    }
  }
  return pids;
}

export interface CpuGroups {
  [group: string]: () => number[];
}

export function cpuSnapshot(groups: CpuGroups): Record<string, number> {
  const out: Record<string, number> = { machine: machineBusySeconds() };
  for (const [group, pids] of Object.entries(groups)) out[group] = pids().reduce((sum, pid) => sum + procCpuSeconds(pid), 0);
  return out;
}

/** Cores used per group over `seconds`; `others` is the machine's busy time not spent by the groups. */
export function cpuDelta(before: Record<string, number>, after: Record<string, number>, seconds: number): Record<string, number> {
  const cores: Record<string, number> = {};
  for (const key of Object.keys(after)) cores[key] = Math.round(((after[key] - (before[key] ?? 0)) / seconds) * 100) / 100;
  const ours = Object.entries(cores)
    .filter(([k]) => k !== 'machine')
    .reduce((s, [, v]) => s + v, 0);
  cores.others = Math.max(0, Math.round((cores.machine - ours) * 100) / 100);
  return cores;
}

/** PostgreSQL backends connected to the current database of `db` (our own, not other sessions'). */
export async function pgBackendPids(db: { raw: (sql: string) => Promise<{ rows: Array<{ pid: number }> }> }): Promise<number[]> {
  return (await db.raw('select pid from pg_stat_activity where datname = current_database()')).rows.map((r) => r.pid);
}

/** A process and all its descendants (a `tsx` launcher, its node, and that node's cluster workers). */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone
    }
  }
  const out: number[] = [];
  const walk = (pid: number) => {
    out.push(pid);
    for (const c of children.get(pid) ?? []) walk(c);
  };
  walk(root);
  return out;
}
