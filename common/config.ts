import { z } from 'zod';
import { parseDuration, parseDurationList } from './duration';

/**
 * The whole configuration, read from the environment and validated once at start-up.
 * docs/configuration.md describes every variable; keep the two in step.
 */
const duration = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((value, ctx) => {
      try {
        return parseDuration(value);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
        return z.NEVER;
      }
    });

const flagDefault = (fallback: '0' | '1') =>
  z
    .enum(['0', '1', 'true', 'false'])
    .default(fallback)
    .transform((v) => v === '1' || v === 'true');
const flag = flagDefault('0');

const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);

export const configSchema = z
  .object({
    NODE_ENV: z.string().default('development'),
    PORT: z.coerce.number().int().min(0).max(65535).default(3000),
    /** API processes on this machine (node:cluster, one port): up to one per core. */
    API_PROCESSES: positiveInt(1),
    /** Worker processes on this machine: each polls the task queue; the first also runs the background loops. */
    WORKER_PROCESSES: positiveInt(1),
    HOST: z.string().default('127.0.0.1'),
    DATABASE_URL: z.string().default('postgres://cloud:cloud@127.0.0.1:5432/cloud'),
    DATABASE_POOL_MAX: positiveInt(10),
    TEMPORAL_ADDRESS: z.string().default('127.0.0.1:7233'),
    TEMPORAL_NAMESPACE: z.string().default('default'),
    TEMPORAL_TASK_QUEUE: z.string().default('cloud-control-plane'),
    TEMPORAL_UI_URL: z.string().default('http://127.0.0.1:8233'),
    /** Register and set the custom search attributes (CloudOperationType, ...). Off for servers without them. */
    TEMPORAL_SEARCH_ATTRIBUTES: flagDefault('1'),
    /** 32+ byte secret (hex or base64) that signs cursors and encrypts secrets at rest. Required in production. */
    CLOUD_MASTER_KEY: z.string().min(32).optional(),
    ORDER_ACTIVATION_TIMEOUT: duration('30m'),
    RECIPE_PROGRESS_TIMEOUT: duration('15m'),
    WEBHOOK_RETRY_DELAYS: z
      .string()
      .default('30s,2m,10m,1h,6h')
      .transform((value, ctx) => {
        try {
          return parseDurationList(value);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: (err as Error).message });
          return z.NEVER;
        }
      }),
    WEBHOOK_TIMEOUT: duration('10s'),
    WEBHOOK_ALLOW_INSECURE_TARGETS: flag,
    /** How often the event dispatcher sweeps for undispatched events (beside LISTEN cloud_events). */
    WEBHOOK_SWEEP_INTERVAL: duration('5s'),
    /** PEM file of extra CA certificates trusted for webhook deliveries (beside the system roots); tests use it for a TLS receiver. */
    WEBHOOK_EXTRA_CA_FILE: z.string().optional(),
    /** Open sockets (busy or idle keep-alive) for webhook deliveries per worker process, across endpoints. */
    WEBHOOK_MAX_SOCKETS: positiveInt(256),
    /** Concurrent attempts (sockets) per webhook endpoint. */
    WEBHOOK_ENDPOINT_CONCURRENCY: positiveInt(16),
    /** Failed attempts in a row after which an endpoint's circuit opens (its due attempts fail without being sent). */
    WEBHOOK_BREAKER_THRESHOLD: positiveInt(20),
    /** How long the circuit stays open before one attempt is sent as a probe. */
    WEBHOOK_BREAKER_COOLDOWN: duration('30s'),
    OPERATION_CACHE_TTL: duration('2s'),
    /** How long GET /v1/operations/{id} waits for a workflow query before answering from PostgreSQL. */
    OPERATION_QUERY_TIMEOUT: duration('1500ms'),
    SESSION_TTL: duration('12h'),
    /** How long an API process trusts a looked-up credential before reading it again (revocation bound). */
    CREDENTIAL_CACHE_TTL: duration('500ms'),
    /** Upper bound for live reads from a backend on single-resource GETs; past it live fields are null. */
    BACKEND_LIVE_TIMEOUT: duration('2s'),
    SIM_DELAY_SCALE: z.coerce.number().min(0).default(1),
    /** How often the worker looks for terminated services whose backend resources still exist (teardown). */
    TEARDOWN_SWEEP_INTERVAL: duration('5s'),
    /** How often the simulated billing system carries out due cancellation requests. */
    SIM_BILLING_INTERVAL: duration('60s'),
    CLOUD_DEV_ENDPOINTS: flag,
    RATE_LIMIT_DEFAULT_PER_KEY: positiveInt(600),
    RATE_LIMIT_DEFAULT_PER_ACCOUNT: positiveInt(1200),
    RATE_LIMIT_MUTATIONS_PER_KEY: positiveInt(120),
    RATE_LIMIT_MUTATIONS_PER_ACCOUNT: positiveInt(240),
    RATE_LIMIT_WINDOW: duration('60s'),
    AUDIT_FLUSH_INTERVAL: duration('200ms'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.NODE_ENV === 'production') {
      if (cfg.CLOUD_DEV_ENDPOINTS)
        ctx.addIssue({ code: 'custom', path: ['CLOUD_DEV_ENDPOINTS'], message: 'refused when NODE_ENV=production' });
      if (cfg.WEBHOOK_ALLOW_INSECURE_TARGETS)
        ctx.addIssue({ code: 'custom', path: ['WEBHOOK_ALLOW_INSECURE_TARGETS'], message: 'refused when NODE_ENV=production' });
      if (!cfg.CLOUD_MASTER_KEY)
        ctx.addIssue({ code: 'custom', path: ['CLOUD_MASTER_KEY'], message: 'required when NODE_ENV=production' });
    }
  });

export type Config = z.infer<typeof configSchema>;

/** Parses the environment; on error prints every bad variable and throws. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Record<string, string>> = {}): Config {
  const source: Record<string, string | undefined> = { ...env, ...overrides };
  // An empty variable means "not set" so that `FOO= npm start` falls back to the default.
  for (const key of Object.keys(source)) if (source[key] === '') delete source[key];
  const parsed = configSchema.safeParse(source);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.') || '(config)'}: ${i.message}`);
    throw new Error(`invalid configuration:\n${lines.join('\n')}`);
  }
  return parsed.data;
}
