/**
 * wrk's text output, read once for every bench that drives it (bench/caas.bench.ts,
 * bench/wordpress.bench.ts): requests, rate, latency percentiles (with `--latency`), errors.
 */
export interface WrkResult {
  requests: number;
  rate: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
  socketErrors: number;
  raw: string;
}

export function toMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text.trim());
  if (!m) return NaN;
  const n = Number(m[1]);
  return m[2] === 'us' ? n / 1000 : m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
}

export function parseWrk(raw: string): WrkResult {
  const pct = (p: string) => toMs(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(raw)?.[1] ?? '');
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(raw);
  return {
    requests: Number(/(\d+) requests in/.exec(raw)?.[1] ?? NaN),
    rate: Number(/Requests\/sec:\s+([\d.]+)/.exec(raw)?.[1] ?? NaN),
    p50: pct('50'),
    p99: pct('99'),
    max: toMs(/Latency\s+\S+\s+\S+\s+(\S+)/.exec(raw)?.[1] ?? ''),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(raw)?.[1] ?? 0),
    socketErrors: socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0,
    raw,
  };
}
