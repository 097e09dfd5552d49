/**
 * What each serverless plan includes per UTC month, its limits, and what use beyond the included
 * amounts costs (SPEC leaves the numbers "not shown"; docs/serverless.md lists them). The plan is the
 * product's slug (DECISIONS "Serverless"). A plan with `hard_cap` is a free tier: the primitive stops
 * at quota instead of billing (cron skips firings, kv and db refuse writes, functions refuse
 * invocations), and `total_usd` stays 0. The `-free` plans are not sold in the catalog; an operator
 * (or a test) provisions them.
 */
export const PRIMITIVES = ['cron', 'db', 'functions', 'kv'] as const;
export type Primitive = (typeof PRIMITIVES)[number];

/** The metered counts of each primitive (DECISIONS), in the order the usage report lists them. */
export const METRICS = {
  cron: ['executions', 'skipped'],
  db: ['rows_read', 'rows_written', 'storage_bytes_peak'],
  functions: ['invocations', 'errors', 'execution_ms'],
  kv: ['reads', 'writes', 'storage_bytes_peak'],
} as const satisfies Record<Primitive, readonly string[]>;

export type Metric = (typeof METRICS)[Primitive][number];
/** Metrics that are a day's maximum rather than a sum (the month's figure is the largest day). */
export const PEAK_METRICS: ReadonlySet<Metric> = new Set<Metric>(['storage_bytes_peak']);

/** The data-plane token prefix of each primitive (DECISIONS: prefix + 40 base62). */
export const TOKEN_PREFIX: Record<Primitive, string> = { cron: 'crt_', db: 'dbt_', functions: 'fnt_', kv: 'kvt_' };

export interface ServerlessPlan {
  primitive: Primitive;
  /** Included per UTC month, for the metrics that have a quota (`skipped` and `errors` have none and are never billed). */
  included: Partial<Record<Metric, number>>;
  hard_cap: boolean;
  /** USD per unit beyond the included amount (storage: per byte of the month's peak over it). */
  prices: Partial<Record<Metric, number>>;
  /** `limits` of `GET /v1/serverless/{p}`: name -> integer. */
  limits: Record<string, number>;
}

const MiB = 1024 * 1024;
const GB = 1_000_000_000;

const cron = (hardCap: boolean, executions: number, minInterval: number): ServerlessPlan => ({
  primitive: 'cron',
  included: { executions },
  hard_cap: hardCap,
  prices: hardCap ? {} : { executions: 0.0001 },
  limits: { max_schedules: hardCap ? 10 : 100, min_interval_seconds: minInterval },
});
const db = (hardCap: boolean): ServerlessPlan => ({
  primitive: 'db',
  included: hardCap
    ? { rows_read: 100_000, rows_written: 10_000, storage_bytes_peak: 100 * MiB }
    : { rows_read: 5_000_000, rows_written: 100_000, storage_bytes_peak: 5 * GB },
  hard_cap: hardCap,
  prices: hardCap ? {} : { rows_read: 0.000001, rows_written: 0.000001, storage_bytes_peak: 0.75 / GB },
  limits: { max_namespaces: hardCap ? 3 : 10, max_result_rows: 10_000 },
});
const functions = (hardCap: boolean, memoryMb: number, timeoutMs: number): ServerlessPlan => ({
  primitive: 'functions',
  included: hardCap ? { invocations: 10_000, execution_ms: 1_000_000 } : { invocations: 100_000, execution_ms: 10_000_000 },
  hard_cap: hardCap,
  prices: hardCap ? {} : { invocations: 0.0000005, execution_ms: 0.00000002 },
  limits: { max_functions: hardCap ? 5 : 50, max_script_bytes: MiB, memory_mb: memoryMb, timeout_ms: timeoutMs },
});
const kv = (hardCap: boolean): ServerlessPlan => ({
  primitive: 'kv',
  included: hardCap ? { reads: 100_000, writes: 1_000, storage_bytes_peak: 100 * MiB } : { reads: 1_000_000, writes: 100_000, storage_bytes_peak: GB },
  hard_cap: hardCap,
  prices: hardCap ? {} : { reads: 0.0000005, writes: 0.000005, storage_bytes_peak: 0.5 / GB },
  limits: { max_value_bytes: hardCap ? MiB : 25 * MiB },
});

/** Settings a plan's limits reflect (CRON_MIN_INTERVAL, FUNCTIONS_MEMORY_MB, FUNCTIONS_TIMEOUT). */
export interface PlanSettings {
  cronMinInterval: number;
  functionsMemoryMb: number;
  functionsTimeoutMs: number;
}

export function serverlessPlans(settings: PlanSettings): Record<string, ServerlessPlan> {
  return {
    'serverless-cron': cron(false, 10_000, settings.cronMinInterval),
    'serverless-cron-free': cron(true, 100, settings.cronMinInterval),
    'serverless-db': db(false),
    'serverless-db-free': db(true),
    'serverless-functions': functions(false, settings.functionsMemoryMb, settings.functionsTimeoutMs),
    'serverless-functions-free': functions(true, settings.functionsMemoryMb, settings.functionsTimeoutMs),
    'serverless-kv': kv(false),
    'serverless-kv-free': kv(true),
  };
}

/** The primitive a serverless product (or plan) slug is for; null when it is none. */
export function primitiveOfProduct(slug: string): Primitive | null {
  const match = /^serverless-(cron|db|functions|kv)(-|$)/.exec(slug);
  return match ? (match[1] as Primitive) : null;
}

export const planSettingsOf = (config: { CRON_MIN_INTERVAL: number; FUNCTIONS_MEMORY_MB: number; FUNCTIONS_TIMEOUT: number }): PlanSettings => ({
  cronMinInterval: config.CRON_MIN_INTERVAL,
  functionsMemoryMb: config.FUNCTIONS_MEMORY_MB,
  functionsTimeoutMs: config.FUNCTIONS_TIMEOUT,
});

export function planOf(slug: string, settings: PlanSettings): ServerlessPlan {
  const plans = serverlessPlans(settings);
  const plan = plans[slug];
  if (plan) return plan;
  const primitive = primitiveOfProduct(slug) ?? 'kv';
  return plans[`serverless-${primitive}`];
}
