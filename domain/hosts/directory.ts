import type { Knex } from 'knex';
import type { HostDirectory } from '../../providers/host-routing';
import { BackendUnavailableError } from '../../providers/errors';
import { adoptService, NoHostError, placementOf, placeService, releasePlacement } from './registry';

/**
 * The host registry as one process sees it (the providers' HostDirectory, plus placing): which host
 * it is the agent of, and which families are placed on hosts in its configuration (those whose
 * real backend is selected; a simulated backend keeps its state in PostgreSQL, on no host).
 */
export class HostPlacements implements HostDirectory {
  constructor(
    private readonly db: Knex,
    readonly self: string | null,
    /** The placed families, each with the resource object of its services and the workflow that moves one. */
    private readonly placedFamilies: ReadonlyMap<string, { object: string; moveWorkflow?: string }>,
  ) {}

  places(family: string): boolean {
    return this.placedFamilies.has(family);
  }

  resourceObject(family: string): string {
    return this.placedFamilies.get(family)?.object ?? 'service';
  }

  moveWorkflow(family: string): string | null {
    return this.placedFamilies.get(family)?.moveWorkflow ?? null;
  }

  /** The placed families. */
  families(): string[] {
    return [...this.placedFamilies.keys()];
  }

  async locate(serviceId: number): Promise<{ host: string; status: 'up' | 'down' | 'draining'; moving: boolean } | null> {
    const placement = await placementOf(this.db, serviceId);
    return placement ? { host: placement.host, status: placement.status, moving: placement.moving_to !== null } : null;
  }
}

/**
 * Places a service of `family` on a host when the family's servers run on hosts (idempotent), and
 * returns the host; null for a family that is not placed. No host with room is an outage of the
 * family's backend: the caller retries (an order waits), the API answers 503.
 */
export async function placeIfHosted(db: Knex, hosts: HostDirectory, family: string, serviceId: number): Promise<string | null> {
  if (!hosts.places(family)) return null;
  try {
    return await placeService(db, family, serviceId);
  } catch (err) {
    if (err instanceof NoHostError) throw new BackendUnavailableError(family, err.message);
    throw err;
  }
}

/** Places a service on this process's own host (the seed, which builds the demo servers here). */
export async function placeHere(db: Knex, hosts: HostDirectory, family: string, serviceId: number): Promise<void> {
  if (hosts.places(family) && hosts.self) await adoptService(db, family, serviceId, hosts.self);
}

/** Forgets where a torn-down service lived. */
export async function releaseService(db: Knex, serviceId: number): Promise<void> {
  await releasePlacement(db, serviceId);
}
