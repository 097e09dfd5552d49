import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { HEALTH_CHECK_PATH_RE, LIMITS, LISTENER_NAME_RE } from '../../../domain/lb/listeners';
import type { LbBalancerRow } from '../../../domain/lb/store';
import type { ServiceRow } from '../../../domain/services';
import { LB_ALGORITHMS, LB_PROTOCOLS, type BalancerStatus, type LbListener, type LbStats } from '../../../providers/lb.provider';
import { idParam } from '../../schemas';

/**
 * The load-balancer family's request and response schemas and presenters (DECISIONS "Load
 * balancers"). The zod schemas check types and ranges and document them; the rules across fields
 * (unique names and ports, a path only on http, no duplicate backend) are domain/lb/listeners.ts,
 * which the providers apply too.
 */
const port = z.number().int().min(1).max(65535);
const weight = z.number().int().min(LIMITS.weight.min).max(LIMITS.weight.max);

export const PROVISIONING_STATES = ['provisioning', 'running', 'stopped', 'deleted'] as const;

export const LoadBalancerSchema = z
  .object({
    object: z.literal('load_balancer'),
    id: z.string().meta({ description: 'The lb service id (`svc_<n>`)' }),
    name: z.string().nullable().meta({ description: "The service's label (or its product name)" }),
    address: z.string().nullable().meta({ description: 'Where the listeners accept traffic; null until the balancer is built' }),
    provisioning_state: z.enum(PROVISIONING_STATES).nullable().meta({
      description:
        'Live: `running` or `stopped` as the balancer reports it; `provisioning` before it is built, `deleted` after termination. Null in lists and when the balancer does not answer',
    }),
    healthy: z
      .boolean()
      .nullable()
      .meta({ description: 'Live: running and no listener down (every backend of a listener failing its check). Null in lists and when unknown' }),
    listener_count: z.number().int().nullable().meta({ description: 'Live: listeners the running balancer has. Null in lists and when it does not answer' }),
    created_at: z.string().nullable(),
  })
  .meta({ id: 'LoadBalancer' });

/** What a backend may point at (docs/lb.md "Backend addresses"; providers/lb.rules.ts backendTargetProblem). */
const BACKEND_IP_RULES =
  "IPv4 or IPv6 address of your server (no host names); private networks are fine. Refused (`400 validation_failed`): link-local addresses (169.254.0.0/16 with the cloud metadata service, fe80::/10), unspecified, multicast and IPv4-compatible addresses, the platform's load balancers and database instances, and this machine itself (loopback, its own addresses): those only on a development instance (ALLOW_INSECURE_TARGETS), and never on a port of the platform's own servers. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) counts as its IPv4 address";
const BACKEND_PORT_RULES =
  "On this machine (development instances only) not a port of the platform's own servers: API, Temporal, PowerDNS, PostgreSQL, a database instance";

export const BackendTargetSchema = z.object({
  ip: z.string().meta({
    description: `${BACKEND_IP_RULES}. IPv6 is stored and shown in short form. A backend refused after it was stored (a port that became the platform's) is left out of the running configuration and shown \`down\``,
    example: '10.0.0.11',
  }),
  port,
  weight: weight.meta({ description: `Share of the listener's traffic, ${LIMITS.weight.min} (none) to ${LIMITS.weight.max}` }),
});

const HealthCheckSchema = z
  .object({
    path: z
      .string()
      .regex(HEALTH_CHECK_PATH_RE, 'must be an absolute path such as /healthz (URL characters only, no spaces or #)')
      .meta({ description: 'http listeners only: GET this path, healthy on 2xx/3xx (default `/`)', example: '/healthz' })
      .optional(),
    interval_seconds: z.number().int().min(LIMITS.intervalSeconds.min).max(LIMITS.intervalSeconds.max),
  })
  .strict();

export const ListenerSchema = z
  .object({
    object: z.literal('lb_listener'),
    name: z.string(),
    protocol: z.enum(LB_PROTOCOLS),
    port,
    algorithm: z.enum(LB_ALGORITHMS),
    health_check: HealthCheckSchema.nullable(),
    backends: z.array(BackendTargetSchema),
  })
  .meta({ id: 'LbListener' });

/** One listener of a PUT body: the resource without `object` (accepted, so a GET's items can be sent back). */
const ListenerInput = z
  .object({
    object: z.literal('lb_listener').optional(),
    name: z.string().regex(LISTENER_NAME_RE, 'must be 1 to 32 lowercase letters, digits or hyphens'),
    protocol: z.enum(LB_PROTOCOLS),
    port,
    algorithm: z.enum(LB_ALGORITHMS).default('roundrobin'),
    health_check: HealthCheckSchema.nullable().default(null),
    backends: z
      .array(
        z
          .object({
            ip: z.string().max(64).meta({ description: BACKEND_IP_RULES, example: '10.0.0.11' }),
            port: port.meta({ description: BACKEND_PORT_RULES }),
            weight: weight.default(1),
          })
          .strict(),
      )
      .max(LIMITS.backendsPerListener),
  })
  .strict();

export const ListenersBody = z
  .object({
    listeners: z
      .array(ListenerInput)
      .max(LIMITS.listeners)
      .meta({ description: 'The complete set: listeners not in it are deleted with their backends; `[]` stops all traffic' }),
  })
  .strict();

export const BackendSchema = z
  .object({
    object: z.literal('lb_backend'),
    listener: z.string().meta({ description: 'Name of the listener the backend belongs to' }),
    ip: z.string(),
    port,
    weight,
  })
  .meta({ id: 'LbBackend' });

export const BackendBody = z
  .object({
    listener: z.string().min(1).max(32).meta({ description: 'Name of an existing listener' }),
    ip: z.string().max(64).meta({ description: BACKEND_IP_RULES, example: '10.0.0.13' }),
    port: port.meta({ description: BACKEND_PORT_RULES }),
    weight: weight.default(1),
  })
  .strict();

const HealthEnum = z.enum(['up', 'down', 'unknown']);

export const LbStatsSchema = z
  .object({
    object: z.literal('lb_stats'),
    listeners: z.array(
      z.object({
        name: z.string(),
        state: HealthEnum.meta({ description: '`unknown` (with zero counters) when the balancer does not answer' }),
        current_connections: z.number().int(),
        bytes_in: z.number().int().meta({ description: 'Since the balancer last started; configuration changes keep counting' }),
        bytes_out: z.number().int(),
        backends: z.array(z.object({ ip: z.string(), port, health: HealthEnum.meta({ description: '`unknown` without a health check' }) })),
      }),
    ),
  })
  .meta({ id: 'LbStats' });

export const idParams = z.object({ id: idParam('svc_1') });
export const backendParams = z.object({
  id: idParam('svc_1'),
  listener: z.string().min(1).max(64).meta({ example: 'web' }),
  ip: z.string().min(1).max(64).meta({ example: '10.0.0.11', description: 'An IPv6 address is percent-encoded (`2001%3Adb8%3A%3A11`)' }),
  // Checked in the handler, after the load balancer is found: an invisible one is 404 whatever the path holds.
  port: z.string().min(1).max(16).meta({ example: '8080', description: 'Integer 1 to 65535' }),
});

/** The listener set as the request gave it, in the providers' terms. */
export function listenersFromBody(body: z.infer<typeof ListenersBody>): LbListener[] {
  return body.listeners.map((l) => ({
    name: l.name,
    protocol: l.protocol,
    port: l.port,
    algorithm: l.algorithm,
    health_check:
      l.health_check === null
        ? null
        : { ...(l.health_check.path !== undefined ? { path: l.health_check.path } : {}), interval_seconds: l.health_check.interval_seconds },
    backends: l.backends.map((b) => ({ ip: b.ip, port: b.port, weight: b.weight })),
  }));
}

export function presentLoadBalancer(
  service: ServiceRow,
  balancer: Pick<LbBalancerRow, 'address'> | null,
  live: BalancerStatus | null | 'not_asked',
): z.input<typeof LoadBalancerSchema> {
  const known = live !== null && live !== 'not_asked' ? live : null;
  let provisioningState: (typeof PROVISIONING_STATES)[number] | null = known?.state ?? null;
  if (!balancer && live !== 'not_asked') provisioningState = service.status === 'terminated' ? 'deleted' : 'provisioning';
  return {
    object: 'load_balancer',
    id: formatId('svc', service.id),
    name: service.label ?? service.name,
    address: balancer?.address ?? null,
    provisioning_state: provisioningState,
    healthy: known ? known.healthy : null,
    listener_count: known ? known.listenerCount : null,
    created_at: iso(service.created_at),
  };
}

export function presentListeners(listeners: LbListener[]): Array<z.input<typeof ListenerSchema>> {
  return listeners.map((l) => ({ object: 'lb_listener', ...l }));
}

export function presentBackends(listeners: LbListener[]): Array<z.input<typeof BackendSchema>> {
  return listeners.flatMap((l) => l.backends.map((b) => ({ object: 'lb_backend' as const, listener: l.name, ip: b.ip, port: b.port, weight: b.weight })));
}

/** Backends sort by listener, then address and port: a stable, unique key for their pages. */
export const backendSortKey = (b: { listener: string; ip: string; port: number }) => `${b.listener}\u0000${b.ip}\u0000${String(b.port).padStart(5, '0')}`;

export function presentStats(stats: LbStats): z.input<typeof LbStatsSchema> {
  return {
    object: 'lb_stats',
    listeners: stats.listeners.map((l) => ({
      name: l.name,
      state: l.state,
      current_connections: l.currentConnections,
      bytes_in: l.bytesIn,
      bytes_out: l.bytesOut,
      backends: l.backends,
    })),
  };
}

/** What stats say when the balancer does not answer: the stored listeners, `unknown`, zero counters. */
export function unknownStats(listeners: LbListener[]): LbStats {
  return {
    listeners: listeners.map((l) => ({
      name: l.name,
      state: 'unknown',
      currentConnections: 0,
      bytesIn: 0,
      bytesOut: 0,
      backends: l.backends.map((b) => ({ ip: b.ip, port: b.port, health: 'unknown' as const })),
    })),
  };
}
