import type { Knex } from 'knex';
import type { Config } from '../common/config';
import type { HostPlacedBackend } from './host-routing';
import type { BackendTargetPolicySource } from './lb.rules';
import type { SimulatedTasks } from './simulator/task-engine';
import type { BackendFamily } from './switchboard';

/**
 * A family's backend, as its manifest names it (families/<family>.ts): how to build its provider
 * from configuration, the simulator by default and the real adapter where one exists. The provider
 * registry (providers/index.ts) builds every family's backend this way and wraps it in its outage
 * switch, so a family registers its backend without editing the registry.
 */

/**
 * The family backends on `Providers`, one field each. A family's backend module adds its field
 * (`declare module './backend' { interface FamilyProviders { dns: DnsProvider } }`), so that
 * `deps.providers.dns` is typed everywhere without a line in providers/index.ts.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface FamilyProviders {}

/** What building a backend may use. */
export interface BackendContext {
  db: Knex;
  config: Config;
  /** The simulators' task engine (work that takes time, faults on demand). */
  tasks: SimulatedTasks;
  /**
   * Where customer-configured backends may point: never a platform address or port (the load
   * balancers' backends). Read at each check, so servers started later count too.
   */
  targets: BackendTargetPolicySource;
}

export interface BackendSpec<K extends keyof FamilyProviders, Real extends FamilyProviders[K] = FamilyProviders[K]> {
  /** The outage switch that governs it (`POST /_dev/backends/{family}/outage`). */
  family: BackendFamily;
  /** Its field on `Providers` (declared in `FamilyProviders`). */
  key: K;
  /** The simulator: state in PostgreSQL, time through the task engine. The default in tests. */
  simulator(ctx: BackendContext): FamilyProviders[K];
  /** The real server's adapter, where one exists, and when configuration selects it. */
  real?: {
    selected(config: Config): boolean;
    create(ctx: BackendContext): Real;
    /**
     * Ports its servers listen on right now on this machine (database instances), read outside
     * the outage switch: load-balancer backends may not point at them.
     */
    listeningPorts?(adapter: Real): Promise<number[]>;
    /**
     * Its servers run on hosts (docs/hosts.md): each service is placed on one, its host's agent runs
     * its server, and calls about it from anywhere else are routed there (providers/host-routing.ts).
     */
    placed?: HostPlacedBackend<Real>;
  };
}

// `any` erases each backend's own key so that backends of different families fit one list.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyBackend = BackendSpec<any, any>;

/** Types a backend spec: the simulator and the real adapter must build the field's provider. */
export function defineBackend<K extends keyof FamilyProviders, Real extends FamilyProviders[K] = FamilyProviders[K]>(
  spec: BackendSpec<K, Real>,
): BackendSpec<K, Real> {
  return spec;
}
