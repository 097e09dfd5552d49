import { isIP } from 'node:net';
import path from 'node:path';
import { hostname } from 'node:os';
import { z } from 'zod';
import { HOST_NAME_PATTERN } from './hosts';
import { parseDuration, parseDurationList } from './duration';
import { isLoopbackRange, parseIpv4Range } from './ipv4-range';
import { serverDataRoot } from '../providers/local-server/data-dir';

/**
 * The whole configuration, read from the environment and validated once at start-up.
 * docs/configuration.md describes every variable; keep the two in step.
 */
/**
 * Where a server family keeps its data when its variable is unset: `<checkout>/.data/<name>`, or,
 * when root runs a checkout whose `.data` other accounts cannot reach (a home of mode 0700), the
 * machine directory `/var/lib/cloud-dev/<hash of the checkout's path>/<name>`: every server runs
 * as an account of its own, which must get to its data.
 */
export const defaultServerDataDir = (name: string): string => path.join(serverDataRoot(path.resolve(__dirname, '..')), name);

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

function isTrustedProxyEntry(entry: string): boolean {
  if (['loopback', 'linklocal', 'uniquelocal'].includes(entry)) return true;
  const [address, prefix, extra] = entry.split('/');
  const family = isIP(address);
  if (!family || extra !== undefined) return false;
  if (prefix === undefined) return true;
  const bits = Number(prefix);
  return /^\d+$/.test(prefix) && bits >= 0 && bits <= (family === 4 ? 32 : 128);
}

/** `scheme://host[:port]` in the form browsers send in `Origin`, or null when `entry` is not one. */
export function parseOrigin(entry: string): string | null {
  try {
    const url = new URL(entry);
    const bare = (url.pathname === '/' || url.pathname === '') && !url.search && !url.hash && !url.username && !url.password;
    return (url.protocol === 'http:' || url.protocol === 'https:') && bare ? url.origin : null;
  } catch {
    return null;
  }
}

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
    /**
     * How long Temporal keeps a workflow's next task for the worker that ran it before (its sticky
     * queue) before handing it to any worker: the pause after a worker dies without saying so.
     */
    TEMPORAL_STICKY_TIMEOUT: duration('10s'),
    TEMPORAL_TASK_QUEUE: z.string().default('cloud-control-plane'),
    TEMPORAL_UI_URL: z.string().default('http://127.0.0.1:8233'),
    /** A workflow bundle built beforehand (bundleWorkflowCode); without it the worker bundles workflows/ at start. */
    WORKFLOW_BUNDLE_PATH: z.string().optional(),
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
    /** ALLOW_INSECURE_TARGETS (this older name still works): http and loopback for webhook targets and load-balancer backends; tests and local runs only. */
    WEBHOOK_ALLOW_INSECURE_TARGETS: flag,
    /** How often the event dispatcher sweeps for undispatched events (beside LISTEN cloud_events). */
    WEBHOOK_SWEEP_INTERVAL: duration('5s'),
    /**
     * Extra loopback ports webhook targets may never reach (beside PORT, the Temporal frontend and UI
     * ports): the local Temporal dev server's HTTP API and metrics ports (npm start sets them).
     */
    WEBHOOK_PROTECTED_PORTS: z
      .string()
      .default('')
      .transform((value, ctx) => {
        const ports = value
          .split(',')
          .map((p) => p.trim())
          .filter(Boolean)
          .map(Number);
        if (ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) {
          ctx.addIssue({ code: 'custom', message: 'must be a comma-separated list of ports (1-65535)' });
          return z.NEVER;
        }
        return ports;
      }),
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
    /** How long an asynchronous POST waits for Temporal to take its workflow before answering 503 (and taking its operation back). */
    OPERATION_START_TIMEOUT: duration('5s'),
    /** An operation with no sign of its workflow this long after it was created is checked by the orphan sweeper. */
    OPERATION_ORPHAN_AFTER: duration('30s'),
    /** How often the worker's orphan sweeper looks for operations whose workflow does not exist. */
    OPERATION_ORPHAN_SWEEP_INTERVAL: duration('10s'),
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
    /**
     * Hosts (docs/hosts.md): a worker process is the host agent of HOST_NAME. It polls the shared task
     * queue and `host-<HOST_NAME>`, and runs and keeps the servers of the resources placed on it.
     */
    HOST_NAME: z
      .string()
      .default(() => hostname())
      .transform((v) => v.toLowerCase())
      .refine((v) => HOST_NAME_PATTERN.test(v), 'must be 1 to 63 characters of a-z, 0-9, "-" and ".", starting with a letter or digit'),
    /** The host's data: its servers' directories default to `<HOST_DATA_DIR>/lb`, `/dbaas` (else the checkout's `.data`). */
    HOST_DATA_DIR: z.string().optional(),
    /** The families whose servers this host runs (comma-separated); all that run on hosts when unset. */
    HOST_FAMILIES: z
      .string()
      .optional()
      .transform((v) =>
        v === undefined
          ? null
          : v
              .split(',')
              .map((s) => s.trim())
              .filter(Boolean),
      ),
    /** How many resources placement puts on this host at most. */
    HOST_CAPACITY: positiveInt(200),
    /** How often the host agent says it is alive; three missed beats and the host is `down`. */
    HOST_HEARTBEAT_INTERVAL: duration('5s'),
    /** Bound on one synchronous call to a resource's server through its host (a listener PUT, a database list). */
    HOST_CALL_TIMEOUT: duration('30s'),
    /** Load balancers: `haproxy` runs one HAProxy process per balancer on this host; `simulator` keeps them in PostgreSQL. */
    LB_BACKEND: z.enum(['haproxy', 'simulator']).default('haproxy'),
    /** Where balancers listen: one IPv4 address shared by all, or an IPv4 CIDR range giving each its own address. */
    LB_BIND_ADDRESS: z
      .string()
      .default('127.77.0.0/16')
      .refine((v) => /^\d{1,3}(\.\d{1,3}){3}(\/([89]|[12]\d|30))?$/.test(v), 'must be an IPv4 address or an IPv4 range such as 127.77.0.0/16 (prefix 8 to 30)'),
    /** HAProxy balancers' configuration, pidfiles and sockets, one directory each (a relative path is taken from the working directory). */
    LB_DATA_DIR: z.string().default(() => defaultServerDataDir('lb')),
    /** How often the worker makes sure every balancer of a live service runs (restarted after a crash or a host restart). */
    LB_KEEPER_INTERVAL: duration('60s'),
    /** `instances`: each dbaas service is its own PostgreSQL/MariaDB server on this machine; `simulator`: PostgreSQL-backed stand-in. */
    DBAAS_BACKEND: z.enum(['instances', 'simulator']).default('instances'),
    /** Where the instances live (data, sockets, TLS, logs, backups); `defaultServerDataDir('dbaas')` when unset. */
    DBAAS_DATA_DIR: z.string().optional(),
    /**
     * Loopback range the instances listen in: each gets the lowest address no other instance uses,
     * and a certificate naming only that address (so verify-full ties a client to its own instance).
     */
    DBAAS_ADDRESS_RANGE: z
      .string()
      .default('127.78.0.0/16')
      .refine((v) => {
        const range = parseIpv4Range(v);
        return range !== null && isLoopbackRange(range);
      }, 'must be an IPv4 range inside 127.0.0.0/8 such as 127.78.0.0/16 (prefix 8 to 30)'),
    /** How often the worker starts the database instances that should run and do not (after a crash or a host restart). */
    DBAAS_KEEPER_INTERVAL: duration('60s'),
    /** Object storage: `seaweedfs` runs one SeaweedFS (S3 + IAM) per host for every account placed there; `simulator` keeps buckets in PostgreSQL. */
    OBJECTSTORAGE_BACKEND: z.enum(['seaweedfs', 'simulator']).default('seaweedfs'),
    /** The host's SeaweedFS: data, settings (its ports, chosen at the first start and kept), pidfile and log. */
    OBJECTSTORAGE_DATA_DIR: z.string().default(() => defaultServerDataDir('objectstorage')),
    /** Where the host's SeaweedFS listens (every port of it). */
    OBJECTSTORAGE_BIND_ADDRESS: z.string().default('127.0.0.1'),
    /** The S3 port asked for at the server's first start (0: a free one); it is kept in the data directory afterwards. */
    OBJECTSTORAGE_S3_PORT: z.coerce.number().int().min(0).max(65535).default(0),
    /** The S3 base URL customers reach this host's server at, when it is not `http://<bind address>:<port>` (a host behind a name or a TLS proxy). */
    OBJECTSTORAGE_PUBLIC_ENDPOINT: z.string().url().optional(),
    /** The SigV4 region of the S3 endpoint. */
    OBJECTSTORAGE_REGION: z
      .string()
      .regex(/^[a-z0-9-]{1,32}$/)
      .default('us-east-1'),
    /** How often a host finds buckets created or deleted directly over S3 (SPEC: listed within 10 s). */
    OBJECTSTORAGE_RECONCILE_INTERVAL: duration('5s'),
    /** How often a host retakes today's usage snapshot of its buckets (one point per bucket and UTC day). */
    OBJECTSTORAGE_SNAPSHOT_INTERVAL: duration('1h'),
    /** How long the buckets of a terminated object storage service are kept before they are deleted. */
    OBJECTSTORAGE_RETENTION: duration('30d'),
    /** Images: the delivery plane's port (`npm start` runs it, `npm run images` alone); 0 picks a free one. */
    IMAGES_PORT: z.coerce.number().int().min(0).max(65535).default(3100),
    /** The delivery plane's URL as tenants see it (`api_endpoint`); default `http://127.0.0.1:<IMAGES_PORT>`. */
    IMAGES_API_ENDPOINT: z.string().url().optional(),
    /** Where the delivery plane keeps transformed images. */
    IMAGES_CACHE_DIR: z.string().default(() => defaultServerDataDir('images-cache')),
    /** The largest source image the delivery plane fetches (bytes); larger ones answer 422 `unsupported_image`. */
    IMAGES_MAX_SOURCE_BYTES: z.coerce
      .number()
      .int()
      .min(1024)
      .default(25 * 1024 * 1024),
    /** Bound on fetching one source image from its origin. */
    IMAGES_FETCH_TIMEOUT: duration('10s'),
    /** Mail gateway: the `/emails` data plane's port (`npm start` runs it); 0 picks a free one. */
    /** CaaS backend: `podman` (rootful podman + HAProxy routers on this host) or `simulator` (PostgreSQL; runs nothing). */
    CAAS_BACKEND: z.enum(['podman', 'simulator']).default('podman'),
    /** Where podman's storage, the base image, the builds and each service's router live. */
    CAAS_DATA_DIR: z.string().default(() => defaultServerDataDir('caas')),
    /** The address the services' routers listen on (each service's `ip`; its `ingress_url` port is chosen free). */
    CAAS_BIND_ADDRESS: z.string().default('127.0.0.1'),
    /** Each app's `default_host` is `<app name>-<service number>.<CAAS_APPS_DOMAIN>` (routed without DNS: send it as the Host header). */
    CAAS_APPS_DOMAIN: z
      .string()
      .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/, 'must be a DNS name')
      .default('apps.localhost'),
    /** The private range the services' container networks are taken from (a /24 each); two checkouts on one machine need two (`npm start` picks one per checkout). */
    CAAS_SUBNET_POOL: z
      .string()
      .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, 'must be an IPv4 CIDR such as 10.213.0.0/16')
      .default('10.213.0.0/16'),
    /** How often the worker's keeper checks that every service's router and serving containers run. */
    CAAS_KEEPER_INTERVAL: duration('30s'),
    /** A deployment that has not started listening on `$PORT` by then fails `start_failed` (DECISIONS: 60s). */
    CAAS_START_TIMEOUT: duration('60s'),
    /** Hosted WordPress backend: `local` (real WordPress on php-fpm, MariaDB and nginx on this host) or `simulator` (PostgreSQL; serves nothing). */
    WORDPRESS_BACKEND: z.enum(['local', 'simulator']).default('local'),
    /** Where the sites' files, PHP pools, nginx, the core releases, the plugin directory and the backups live. */
    WORDPRESS_DATA_DIR: z.string().default(() => defaultServerDataDir('wordpress')),
    /** The address nginx serves every site on (each site's `ip`). */
    WORDPRESS_BIND_ADDRESS: z.string().default('127.0.0.1'),
    /** The port nginx serves every site on by Host (each site's `http_port`); 0 picks a free one at first start. */
    WORDPRESS_HTTP_PORT: z.coerce.number().int().min(0).max(65535).default(8088),
    /** `host:port` of the SMTP relay sites send mail through (`npm start`: its mail catcher); unset: mail is not sent and `sent` says why. */
    WORDPRESS_SMTP_RELAY: z
      .string()
      .regex(/^[A-Za-z0-9.-]+:\d{1,5}$/, 'must be host:port')
      .optional(),
    /** How often the worker's keeper checks that every site's PHP and the host's nginx run (and repairs them). */
    WORDPRESS_KEEPER_INTERVAL: duration('30s'),
    /** How often the worker's backup scheduler starts the sites' daily backups that are due and prunes those past their retention. */
    WORDPRESS_BACKUP_SCHEDULE_INTERVAL: duration('15m'),
    /** Serverless: the data planes' port (cron, db, functions, kv under one process; `npm start` runs it, `npm run serverless` alone); 0 picks a free one. */
    SERVERLESS_PORT: z.coerce.number().int().min(0).max(65535).default(3300),
    /** Processes serving the serverless kv primitive: the data planes' process and SERVERLESS_KV_PROCESSES - 1 kv helpers it starts and hands kv connections to (dataplane/serverless/processes.ts). */
    SERVERLESS_KV_PROCESSES: positiveInt(1),
    /** The data planes' base URL as tenants see it; each primitive's `api_endpoint` is `<base>/<primitive>`. Default `http://127.0.0.1:<SERVERLESS_PORT>`. */
    SERVERLESS_API_ENDPOINT: z.string().url().optional(),
    /** Where the serverless data planes keep their servers' data: Redis (kv), the SQLite files (db), the functions' modules. */
    SERVERLESS_DATA_DIR: z.string().default(() => defaultServerDataDir('serverless')),
    /** The kv backend: `redis` (a local redis-server, Debian's package) or `simulator` (PostgreSQL). */
    KV_BACKEND: z.enum(['redis', 'simulator']).default('redis'),
    /** The smallest `interval_seconds` a cron schedule may have (DECISIONS: 60; tests use 1). */
    CRON_MIN_INTERVAL: z.coerce.number().int().min(1).default(60),
    /** A db query is stopped (400 `sql_error`) when it runs longer than this. */
    SERVERLESS_DB_QUERY_TIMEOUT: duration('5s'),
    /** The heap limit of each tenant's functions process (MiB): past it the process is stopped and started again. */
    FUNCTIONS_MEMORY_MB: z.coerce.number().int().min(16).max(4096).default(128),
    /** An invocation that has not answered within this gets 504 and counts as an error. */
    FUNCTIONS_TIMEOUT: duration('30s'),
    MAIL_PORT: z.coerce.number().int().min(0).max(65535).default(3200),
    /** The mail data plane's URL as accounts see it (`api_endpoint`); default `http://127.0.0.1:<MAIL_PORT>`. */
    MAIL_API_ENDPOINT: z.string().url().optional(),
    /** The mail gateway's MTA (Haraka, one per host): its configuration, queue, settings (its port, kept) and log. */
    MAIL_DATA_DIR: z.string().default(() => defaultServerDataDir('mail')),
    /** The SMTP submission port asked for at the MTA's first start (0: a free one); it is kept in the data directory afterwards. */
    MAIL_SMTP_PORT: z.coerce.number().int().min(0).max(65535).default(0),
    /** The SMTP host name customers are told (`GET /v1/mail-gateway/smtp`); default the MTA's bind address. */
    MAIL_SMTP_HOST: z.string().min(1).optional(),
    /** `host:port` every outgoing message is relayed to instead of the recipients' MX (local runs: a sink). Unset: MX lookup. */
    MAIL_SMARTHOST: z
      .string()
      .regex(/^[^:\s]+:\d{1,5}$/, 'must be host:port')
      .optional(),
    /** The host a sending domain's bounce subdomain points its MX at (`mail_from_mx`), and its SPF names. */
    MAIL_MX_HOST: z
      .string()
      .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/, 'must be a host name such as mx.mail.example.net')
      .default('mx.mail.localhost'),
    /** Sending is suspended when the last 30 days' bounce rate (a fraction of sends) is over this. */
    MAIL_BOUNCE_RATE_LIMIT: z.coerce.number().min(0).max(1).default(0.05),
    /** ... or the complaint rate is over this. */
    MAIL_COMPLAINT_RATE_LIMIT: z.coerce.number().min(0).max(1).default(0.001),
    /** No rate suspends a gateway with fewer sends than this in the last 30 days (DECISIONS: 200). */
    MAIL_SUSPEND_MIN_SENDS: z.coerce.number().int().min(0).default(200),
    /**
     * Where every "is this record published / does this name point here" check resolves (`host:port`;
     * DECISIONS "Data planes and outbound fetches"): mail domain verification. Unset: the system's resolver.
     */
    DNS_RESOLVER: z
      .string()
      .regex(/^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/, 'must be host:port (an IPv6 address in brackets)')
      .optional(),
    /** DNS family: `powerdns` (the real server, through its HTTP API) or `simulator` (PostgreSQL, answers no queries). */
    DNS_BACKEND: z.enum(['powerdns', 'simulator']).default('powerdns'),
    /** Where the local run's PowerDNS answers DNS queries (UDP and TCP). */
    DNS_SERVER_ADDRESS: z.string().default('127.0.0.1:5300'),
    /** PowerDNS's HTTP API; `npm start` runs a local server there unless one already answers. */
    POWERDNS_API_URL: z.string().url().default('http://127.0.0.1:5381'),
    /** The API key; when unset it is read from POWERDNS_DATA_DIR/api-key (generated once by the local server). Never logged. */
    POWERDNS_API_KEY: z.string().min(1).optional(),
    /** The local server's data: SQLite database, configuration and API key (0600). */
    POWERDNS_DATA_DIR: z.string().default(() => defaultServerDataDir('powerdns')),
    /** Bound on one call to the PowerDNS API. */
    POWERDNS_TIMEOUT: duration('5s'),
    /** Name servers of every new zone (its NS records; the first is the SOA primary), comma-separated. */
    DNS_NAMESERVERS: z
      .string()
      .default('ns1.cloud.test,ns2.cloud.test')
      .transform((v) =>
        v
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      )
      .refine((list) => list.length > 0, 'at least one name server'),
    /** The SOA contact (RNAME) of every new zone, as a host name. */
    DNS_HOSTMASTER: z.string().default('hostmaster.cloud.test'),
    /**
     * The platform's own names, comma-separated: no customer zone may equal, contain or lie inside one
     * (the name servers' and the hostmaster's domains are reserved as well; domain/dns/zone-policy.ts).
     */
    DNS_RESERVED_ZONES: z
      .string()
      .default('localhost,localdomain,local,invalid,internal,onion,arpa')
      .transform((v) =>
        v
          .split(',')
          .map((s) => s.trim().toLowerCase().replace(/\.$/, ''))
          .filter(Boolean),
      )
      .refine((list) => list.every((name) => /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(name)), 'names such as localhost,arpa (ASCII; IDN as punycode)'),
    /** How often the simulated billing system carries out due cancellation requests. */
    SIM_BILLING_INTERVAL: duration('60s'),
    CLOUD_DEV_ENDPOINTS: flag,
    RATE_LIMIT_DEFAULT_PER_KEY: positiveInt(600),
    RATE_LIMIT_DEFAULT_PER_ACCOUNT: positiveInt(1200),
    RATE_LIMIT_MUTATIONS_PER_KEY: positiveInt(120),
    RATE_LIMIT_MUTATIONS_PER_ACCOUNT: positiveInt(240),
    RATE_LIMIT_WINDOW: duration('60s'),
    /** Sign-in attempts allowed per email address, and per client IP, in one LOGIN_THROTTLE_WINDOW (all API processes together). */
    LOGIN_MAX_ATTEMPTS_PER_EMAIL: positiveInt(10),
    LOGIN_MAX_ATTEMPTS_PER_IP: positiveInt(50),
    LOGIN_THROTTLE_WINDOW: duration('15m'),
    /**
     * A request holding its Idempotency-Key longer than this is taken to have died with its process: a
     * retry answers with the operation it created, or runs it when it created none. Longer than any request.
     */
    IDEMPOTENCY_ABANDON_AFTER: duration('60s'),
    /** How often the worker deletes records whose time is up (ended throttle windows, expired idempotency keys). */
    RETENTION_SWEEP_INTERVAL: duration('60s'),
    /**
     * Reverse proxies whose X-Forwarded-For is believed (the client IP of rate limits, sign-in
     * throttling, the audit log and the loopback check of /_dev): addresses, CIDR ranges, or
     * `loopback`, `linklocal`, `uniquelocal`. Empty: the peer address is the client.
     */
    TRUSTED_PROXIES: z
      .string()
      .default('')
      .transform((value, ctx) => {
        const entries = value
          .split(',')
          .map((p) => p.trim())
          .filter(Boolean);
        const bad = entries.filter((e) => !isTrustedProxyEntry(e));
        if (bad.length) {
          ctx.addIssue({ code: 'custom', message: `not an address, CIDR range, loopback, linklocal or uniquelocal: ${bad.join(', ')}` });
          return z.NEVER;
        }
        return entries;
      }),
    /**
     * Browser origins (`https://console.example.com`) allowed to call `POST /mcp` besides the API's
     * own, comma-separated; their host names also count as hosts this server serves (mcp/http.ts).
     */
    MCP_ALLOWED_ORIGINS: z
      .string()
      .default('')
      .transform((value, ctx) => {
        const origins: string[] = [];
        for (const entry of value
          .split(',')
          .map((o) => o.trim())
          .filter(Boolean)) {
          const origin = parseOrigin(entry);
          if (origin) origins.push(origin);
          else ctx.addIssue({ code: 'custom', message: `not an http(s) origin such as https://console.example.com: ${entry}` });
        }
        return origins;
      }),
    AUDIT_FLUSH_INTERVAL: duration('200ms'),
    /** Audit entries held in memory while PostgreSQL does not answer; past it new entries are dropped (and logged). */
    AUDIT_QUEUE_MAX: positiveInt(50_000),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.NODE_ENV === 'production') {
      if (cfg.CLOUD_DEV_ENDPOINTS) ctx.addIssue({ code: 'custom', path: ['CLOUD_DEV_ENDPOINTS'], message: 'refused when NODE_ENV=production' });
      if (cfg.WEBHOOK_ALLOW_INSECURE_TARGETS)
        ctx.addIssue({ code: 'custom', path: ['WEBHOOK_ALLOW_INSECURE_TARGETS'], message: 'refused when NODE_ENV=production' });
      if (!cfg.CLOUD_MASTER_KEY) ctx.addIssue({ code: 'custom', path: ['CLOUD_MASTER_KEY'], message: 'required when NODE_ENV=production' });
    }
  });

export type Config = z.infer<typeof configSchema>;

/** Parses the environment; on error prints every bad variable and throws. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Record<string, string>> = {}): Config {
  const source: Record<string, string | undefined> = { ...env, ...overrides };
  // An empty variable means "not set" so that `FOO= npm start` falls back to the default.
  for (const key of Object.keys(source)) if (source[key] === '') delete source[key];
  // ALLOW_INSECURE_TARGETS is the flag's name (DECISIONS); WEBHOOK_ALLOW_INSECURE_TARGETS, its older one, still works.
  if (source.ALLOW_INSECURE_TARGETS !== undefined) source.WEBHOOK_ALLOW_INSECURE_TARGETS = source.ALLOW_INSECURE_TARGETS;
  // A host's servers live under its HOST_DATA_DIR unless their own directory is set.
  if (source.HOST_DATA_DIR) {
    source.LB_DATA_DIR ??= path.join(source.HOST_DATA_DIR, 'lb');
    source.DBAAS_DATA_DIR ??= path.join(source.HOST_DATA_DIR, 'dbaas');
    source.OBJECTSTORAGE_DATA_DIR ??= path.join(source.HOST_DATA_DIR, 'objectstorage');
  }
  const parsed = configSchema.safeParse(source);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.') || '(config)'}: ${i.message}`);
    throw new Error(`invalid configuration:\n${lines.join('\n')}`);
  }
  return parsed.data;
}
