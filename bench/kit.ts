import os from 'node:os';

/** What the benchmarks share to print a run: the load average, the time, a target's verdict. */

/** The 1-, 5- and 15-minute load averages, as `0.42 0.61 0.70`. */
export const load = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Milliseconds, monotonic. */
export const now = () => performance.now();
export const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
