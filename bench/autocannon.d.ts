/** The part of autocannon 8's API that bench/api.bench.ts uses (the package ships no types). */
declare module 'autocannon' {
  interface Histogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    total: number;
    p50: number;
    p90: number;
    p97_5: number;
    p99: number;
    p99_9: number;
  }
  interface Options {
    url: string;
    connections?: number;
    pipelining?: number;
    duration?: number;
    amount?: number;
    workers?: number;
    headers?: Record<string, string>;
    timeout?: number;
    method?: string;
    body?: string;
    /** Cycled through by every connection. */
    requests?: Array<{ method?: string; path?: string; body?: string; headers?: Record<string, string> }>;
  }
  interface Result {
    requests: Histogram & { sent: number };
    latency: Histogram;
    throughput: Histogram;
    errors: number;
    timeouts: number;
    non2xx: number;
    '1xx': number;
    '2xx': number;
    '3xx': number;
    '4xx': number;
    '5xx': number;
    resets: number;
    duration: number;
    connections: number;
    statusCodeStats: Record<string, { count: number }>;
  }
  function autocannon(options: Options): Promise<Result>;
  export = autocannon;
}
