import type { ActivityDeps } from '../activities/deps';
import type { BackgroundService } from '../common/periodic';
import type { AnyRoute } from '../api/route';
import type { Config } from '../common/config';
import type { Keyring } from '../common/crypto';
import type { Db } from '../db/knex';
import type { ProvisionerDeps, ProvisionerRegistry, ServiceProvisioner } from '../domain/provisioning';
import type { Providers } from '../providers';
import type { AnyBackend } from '../providers/backend';
import type { LbBackendTarget } from '../providers/lb.provider';

/**
 * A family's manifest: everything the central registries need to know about it, in one object
 * (families/<family>.ts), listed once in families/index.ts. The route table, the dev routes, the
 * provider registry, the provisioners, the worker's activities and the demo seed read the list;
 * the workflow bundle is the one exception (see `workflows`). docs/adding-a-family.md says what
 * else a family writes; test/fixtures/skeleton-family/ is one to copy.
 */
export interface FamilyManifest {
  /** Its name: the catalog product family (common/families.ts), or a platform part (`orders`, `webhooks`). */
  readonly name: string;
  /** Its `/v1` routes (`api/routes/<family>/routes.ts`), in the order the route table lists them. */
  readonly routes: readonly AnyRoute[];
  /** Its local stand-ins under `/_dev` (`api/routes/<family>/dev.routes.ts`), mounted with CLOUD_DEV_ENDPOINTS=1. */
  readonly devRoutes?: readonly AnyRoute[];
  /** Its backend (`providers/<backend>.backend.ts`): the simulator, and the real adapter where one exists. */
  readonly backend?: AnyBackend;
  /** Builds the services an order creates (`domain/<family>/provisioner.ts`); without one, the generic simulated build. */
  readonly provisioner?: (deps: ProvisionerDeps) => ServiceProvisioner;
  /** Its activities (`activities/<family>/activities.ts`), registered on the worker; names are unique across families. */
  readonly activities?: (deps: FamilyActivityDeps) => Record<string, (...args: never[]) => Promise<unknown>>;
  /**
   * The folder of its workflows, from the repository's root (`workflows/vps`), whose `index.ts`
   * exports them. Workflows are bundled by path, apart from this Node-side manifest, so the bundle's
   * entry (`workflows/index.ts`) re-exports the folder and this names it; test/kit-families.unit.test.ts
   * checks the two agree.
   */
  readonly workflows?: string;
  /**
   * Its keepers (`domain/<family>/keeper.ts`): loops beside the worker that keep its servers running
   * (after a host restart, after a crash), each only its own host's when its servers run on hosts.
   */
  readonly keepers?: (deps: ActivityDeps) => readonly BackgroundService[];
  /** Demo data for `npm start` (`db/seeds/<family>.seed.ts`): its seeded services get their backend resources. Idempotent. */
  readonly seed?: (ctx: FamilySeedContext) => Promise<void>;
  /** The settings it reads (declared in common/config.ts, described in docs/configuration.md, which a test checks). */
  readonly config?: readonly (keyof Config)[];
}

/** What a family's activities are built over: the worker's dependencies and every family's provisioner. */
export type FamilyActivityDeps = ActivityDeps & { provisioners: ProvisionerRegistry };

/** What a family's seed gets from `seedDemo` (db/seeds/index.ts). */
export interface FamilySeedContext {
  db: Db;
  providers: Providers;
  /** Seals secrets the seed stores (the seeded database services' admin passwords). */
  keyring: Keyring;
  config: Config;
  /** The API's port in this run. */
  apiPort: number;
  /** The demo web servers `npm start` runs, for the seeded load balancer. */
  demoBackends?: LbBackendTarget[];
}

/** Types a manifest literal. */
export function defineFamily<const M extends FamilyManifest>(manifest: M): M {
  return manifest;
}
