/** Latency statistics the benchmarks share. */
export interface Summary {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  mean: number;
  max: number;
}

/** Percentiles (nearest rank), mean and max of `samples`; NaN where there are none. */
export function summarize(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
  return {
    n: sorted.length,
    p50: at(0.5),
    p95: at(0.95),
    p99: at(0.99),
    mean: sorted.reduce((s, v) => s + v, 0) / Math.max(1, sorted.length),
    max: sorted[sorted.length - 1] ?? NaN,
  };
}

/** The median of rounds (the lower middle one for an even count). */
export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
