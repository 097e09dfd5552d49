import type { HostStatus } from '../common/hosts';
import { BackendGoneError, BackendUnavailableError } from './errors';

/**
 * Routing of provider calls to the host a resource lives on (docs/hosts.md). A backend whose servers
 * run on hosts (the HAProxy balancers, the database instances) is wrapped once by the provider
 * registry: each call names its service (`HostPlacedBackend.serviceOf`), the registry says on which
 * host it is placed, and the call runs here when this process is that host's agent, or else on that
 * host, as a short `hostCallWorkflow` on its task queue (infra/host-calls.ts) whose outcome comes back
 * as the same value or provider error. A host that is `down` answers like an unreachable backend at
 * once, without waiting for the call to time out.
 */

/** What a backend spec says about its servers when they run on hosts (`placed` in providers/backend.ts). */
export interface HostPlacedBackend<P = unknown> {
  /** The resource object of its services, as `/_dev/hosts` lists them (`load_balancer`, `dbaas`). */
  object: string;
  /**
   * The service a call is about, from its method and arguments; `host` for calls about the host
   * itself (a keeper's pass over every server here), which run on this process's own servers.
   */
  serviceOf(method: string, args: unknown[]): number | 'host';
  /** The services whose servers this host has (its data directory): a host adopts them when it starts. */
  localServices(adapter: P): Promise<number[]>;
  /** The workflow that moves a service's server to another host, where the family can (docs/hosts.md "Moving"). */
  moveWorkflow?: string;
  /** The provider's methods calls may go through (its interface): no other method runs through the router, here or on a host. */
  calls: readonly string[];
}

/** The host registry, as the providers see it (domain/hosts/directory.ts implements it). */
export interface HostDirectory {
  /** The host this process is the agent of (a worker), or null (the API). */
  readonly self: string | null;
  /** Whether the servers of `family` are placed on hosts here (its real backend is selected). */
  places(family: string): boolean;
  /** The resource object of a placed family's services (`load_balancer`), for listings. */
  resourceObject(family: string): string;
  /** The workflow that moves a service of `family` to another host; null where the family cannot move. */
  moveWorkflow(family: string): string | null;
  /** Where the server of a service lives, whether that host is alive, whether it is moving; null when it was never placed. */
  locate(serviceId: number): Promise<{ host: string; status: HostStatus; moving: boolean } | null>;
}

export interface HostCallRequest {
  /** The backend family (its outage switch), for errors and the workflow's id. */
  family: string;
  /** The provider's field on `Providers` (`lb`, `dbaas`). */
  key: string;
  method: string;
  /** Encoded (providers/host-wire.ts). */
  args: unknown[];
  serviceId: number;
}

/**
 * A host call as it travels (the `hostCallWorkflow`'s input): the whole call sealed with the master
 * key (`HOST_CALL_PURPOSE`), since some arguments are passwords and workflow inputs stay in Temporal's
 * history, with the time after which the host refuses it (a sealed call copied from a history cannot
 * be sent again later, nor under another method: the host uses only what it unseals). The clear
 * fields name the call for the workflow's id and the logs, nothing more.
 */
export type SealedHostCall = Omit<HostCallRequest, 'args'> & { sealed: string; timeoutMs: number };

/** What `sealed` holds. */
export interface HostCallContent extends Omit<HostCallRequest, 'args'> {
  /** Encoded (providers/host-wire.ts). */
  args: unknown[];
  /** Epoch ms after which the host refuses the call. */
  expiresAt: number;
}
export const HOST_CALL_PURPOSE = 'host-call-arguments';

/** Runs a provider call on a host and returns its (decoded) value or throws its (decoded) error. */
export interface HostCaller {
  call(host: string, request: HostCallRequest): Promise<unknown>;
}

/**
 * Wraps a host-placed backend's adapter: calls about a service placed on this host run on `local`,
 * the others on their host through `caller`. A service with no placement is looked for here when this
 * process is a host agent (a never-built service is then simply not found), and is gone otherwise.
 */
export function routeToHosts<T extends object>(
  local: T,
  route: { family: string; key: string; placed: HostPlacedBackend<T>; directory: HostDirectory; caller: HostCaller | null },
): T {
  const { family, key, placed, directory, caller } = route;
  return new Proxy(local, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || prop === 'constructor' || typeof prop !== 'string') return value;
      const here = (args: unknown[]) => (value as (...a: unknown[]) => unknown).apply(target, args);
      return async (...args: unknown[]) => {
        if (!placed.calls.includes(prop)) throw new Error(`${family}.${prop} is not a call of its provider`);
        const serviceId = placed.serviceOf(prop, args);
        if (serviceId === 'host') {
          if (!directory.self) throw new Error(`${family}.${prop} runs on a host agent only`);
          return here(args);
        }
        const at = await directory.locate(serviceId);
        if (!at) {
          if (directory.self) return here(args);
          throw new BackendGoneError(family, `server of svc_${serviceId}`, `The server of svc_${serviceId} is not placed on any host.`);
        }
        // A server being copied to another host takes no call (a change would be lost, a start would race the copy).
        if (at.moving) throw new BackendUnavailableError(family, `svc_${serviceId} is moving from host ${at.host} to another`);
        if (at.host === directory.self) return here(args);
        if (at.status === 'down') throw new BackendUnavailableError(family, `host ${at.host} is down`);
        if (!caller) throw new BackendUnavailableError(family, `host ${at.host} cannot be reached from this process`);
        return caller.call(at.host, { family, key, method: prop, args, serviceId });
      };
    },
  });
}
