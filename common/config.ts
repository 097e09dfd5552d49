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
    /** Load balancers: `haproxy` runs one HAProxy process per balancer on this host; `simulator` keeps them in PostgreSQL. */
    LB_BACKEND: z.enum(['haproxy', 'simulator']).default('haproxy'),
    /** Where balancers listen: one IPv4 address shared by all, or an IPv4 CIDR range giving each its own address. */
    LB_BIND_ADDRESS: z
      .string()
      .default('127.77.0.0/16')
      .refine((v) => /^\d{1,3}(\.\d{1,3}){3}(\/([89]|[12]\d|30))?$/.test(v), 'must be an IPv4 address or an IPv4 range such as 127.77.0.0/16 (prefix 8 to 30)'),
    /** HAProxy balancers' configuration, pidfiles and sockets, one directory each (relative to the working directory). */
    LB_DATA_DIR: z.string().default('.data/lb'),
    /** How often the worker makes sure every balancer of a live service runs (restarted after a crash or a host restart). */
    LB_KEEPER_INTERVAL: duration('60s'),
    /** `instances`: each dbaas service is its own PostgreSQL/MariaDB server on this machine; `simulator`: PostgreSQL-backed stand-in. */
    DBAAS_BACKEND: z.enum(['instances', 'simulator']).default('instances'),
    /** Where the instances live (data, sockets, TLS, logs, backups); `<checkout>/.data/dbaas` when unset. */
    DBAAS_DATA_DIR: z.string().optional(),
    /** The address clients are given to reach the instances (they listen on 127.0.0.1). */
    DBAAS_HOST: z.string().default('127.0.0.1'),
    /** How often the worker starts the database instances that should run and do not (after a crash or a host restart). */
    DBAAS_KEEPER_INTERVAL: duration('60s'),
    /** DNS family: `powerdns` (the real server, through its HTTP API) or `simulator` (PostgreSQL, answers no queries). */
    DNS_BACKEND: z.enum(['powerdns', 'simulator']).default('powerdns'),
    /** Where the local run's PowerDNS answers DNS queries (UDP and TCP). */
    DNS_SERVER_ADDRESS: z.string().default('127.0.0.1:5300'),
    /** PowerDNS's HTTP API; `npm start` runs a local server there unless one already answers. */
    POWERDNS_API_URL: z.string().url().default('http://127.0.0.1:5381'),
    /** The API key; when unset it is read from POWERDNS_DATA_DIR/api-key (generated once by the local server). Never logged. */
    POWERDNS_API_KEY: z.string().min(1).optional(),
    /** The local server's data: SQLite database, configuration and API key (0600). */
    POWERDNS_DATA_DIR: z.string().default('.data/powerdns'),
    /** Bound on one call to the PowerDNS API. */
    POWERDNS_TIMEOUT: duration('5s'),
    /** Name servers of every new zone (its NS records; the first is the SOA primary), comma-separated. */
    DNS_NAMESERVERS: z
      .string()
      .default('ns1.cloud.test,ns2.cloud.test')
      .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean))
      .refine((list) => list.length > 0, 'at least one name server'),
    /** The SOA contact (RNAME) of every new zone, as a host name. */
    DNS_HOSTMASTER: z.string().default('hostmaster.cloud.test'),
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
