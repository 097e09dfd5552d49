import type { Knex } from 'knex';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { SimulatedBillingClock } from './simulator/billing-clock';
import { backendOf } from '../common/families';
import type { AnyBackend, BackendContext, FamilyProviders } from './backend';
import type { BillingProvider } from './billing.provider';
import type { ServiceBuildProvider } from './builds.provider';
import type { BackendTargetPolicySource } from './lb.rules';
import { routeToHosts, type HostCaller, type HostDirectory } from './host-routing';
import { platformTargets } from './lb.targets';
import { localServicePorts } from '../common/platform-ports';
import { BillingSimulator } from './simulator/billing.simulator';
import { BuildSimulator } from './simulator/build.simulator';
import { SimulatedTasks } from './simulator/task-engine';
import { BackendSwitchboard, withOutageSwitch, type BackendFamily } from './switchboard';

export type { FamilyProviders } from './backend';

/**
 * Every backend the control plane talks to, behind its provider interface. The platform's own
 * (billing, the generic build backend) are built here; each family's backend is built from its
 * manifest's backend spec (`providers/<backend>.backend.ts`: the real adapter where one exists and
 * configuration selects it, else the simulator), which also declares its field (`FamilyProviders`).
 * All are wrapped once in their outage switch, so faults never fork a provider.
 */
export interface Providers extends FamilyProviders {
  switchboard: BackendSwitchboard;
  billing: BillingProvider;
  /** Builds services of the families without a backend of their own (domain/provisioning.ts). */
  builds: ServiceBuildProvider;
  /** Where load-balancer backends may point right now (platform ports and addresses, ALLOW_INSECURE_TARGETS). */
  lbTargets: BackendTargetPolicySource;
  /** Fault injection into simulated backends' tasks (dev routes, tests); null when none is simulated. */
  faults: FaultInjector | null;
  /** The hosts the servers of placed backends run on, as this process sees them (docs/hosts.md). */
  hosts: HostDirectory;
  /**
   * Each placed family's servers on this machine: its provider's key, and the services whose servers
   * are in this machine's data directory (a host agent adopts them). The keys are the only providers
   * calls may reach through a host.
   */
  localServers: Array<{ family: string; key: string; services(): Promise<number[]> }>;
  /**
   * The placed families' own adapters on this machine, behind their outage switch but not routed: what
   * a move runs on each end (the new host builds before the placement says it is there, the old one
   * destroys after it no longer does). Only the agent of a host uses them.
   */
  local: Partial<FamilyProviders>;
}

/** How this process reaches hosts: the registry, and the caller for the hosts it is not (null: none reachable). */
export interface HostRouting {
  directory: HostDirectory;
  caller: HostCaller | null;
}

/** No hosts: every backend runs in this process (tools and tests that build providers by hand). */
const NO_HOSTS: HostRouting = {
  directory: { self: null, places: () => false, resourceObject: () => 'service', moveWorkflow: () => null, locate: async () => null },
  caller: null,
};

export interface FaultInjector {
  /** The subject's next task (of `kind`, when given) on that backend ends in error, without effect. */
  failNext(backend: BackendFamily, subject: string | number, opts?: { kind?: string; message?: string }): Promise<void>;
}

/**
 * The providers of one process. `backends` are the families' (`familyBackends()` in families/index.ts
 * lists them from the manifests; `createProviders` there passes them).
 */
export function buildProviders(
  { db, config, hosts = NO_HOSTS }: { db: Knex; config: Config; hosts?: HostRouting },
  backends: readonly AnyBackend[],
): Providers {
  const switchboard = new BackendSwitchboard(db);
  const tasks = new SimulatedTasks(db, config.SIM_DELAY_SCALE);
  const billing = new BillingSimulator(db, switchboard, config.SIM_DELAY_SCALE);
  const builds = withOutageSwitch(new BuildSimulator(db, tasks), switchboard, ([target]) => backendOf((target as { productFamily: string }).productFamily));
  // Filled below as real servers are built; read by the policy at each check, never before.
  const listening: Array<() => Promise<number[]>> = [];
  const lbTargets = lbTargetsOf(config, listening);
  const ctx: BackendContext = { db, config, tasks, targets: lbTargets };
  const built: Record<string, unknown> = {};
  const localServers: Providers['localServers'] = [];
  const local: Record<string, unknown> = {};
  for (const backend of backends) {
    if (backend.key in built) throw new Error(`Two backends claim providers.${String(backend.key)}`);
    const real = backend.real?.selected(config) ? backend.real : null;
    const provider = real ? real.create(ctx) : backend.simulator(ctx);
    if (real?.listeningPorts) listening.push(() => real.listeningPorts!(provider));
    if (real?.placed && hosts.directory.places(backend.family)) {
      const placed = real.placed;
      localServers.push({ family: backend.family, key: String(backend.key), services: () => placed.localServices(provider) });
      local[backend.key] = withOutageSwitch(provider as object, switchboard, backend.family);
    }
    const routed =
      real?.placed && hosts.directory.places(backend.family)
        ? routeToHosts(provider as object, { family: backend.family, key: String(backend.key), placed: real.placed, ...hosts })
        : (provider as object);
    built[backend.key] = withOutageSwitch(routed, switchboard, backend.family);
  }
  return {
    ...(built as unknown as FamilyProviders),
    switchboard,
    billing,
    builds,
    lbTargets,
    faults: tasks,
    hosts: hosts.directory,
    localServers,
    local: local as Partial<FamilyProviders>,
  };
}

/**
 * Where load-balancer backends may point (docs/lb.md "Backend addresses"): the API checks a change
 * with it, the HAProxy adapter every configuration it renders. The ports of servers a backend runs on
 * this machine (the database instances) are read from those servers themselves, outside their outage
 * switch (a switched-off family still listens).
 */
function lbTargetsOf(config: Config, listening: ReadonlyArray<() => Promise<number[]>>): BackendTargetPolicySource {
  return platformTargets({
    allowLoopback: config.WEBHOOK_ALLOW_INSECURE_TARGETS,
    platformRanges: [
      { range: config.LB_BIND_ADDRESS, what: "the platform's load balancers" },
      { range: config.DBAAS_ADDRESS_RANGE, what: "the platform's database instances" },
    ],
    configuredPorts: localServicePorts(config),
    dynamicPorts: listening,
  });
}

/**
 * Loops a simulated backend runs by itself (a real one runs its own): the billing clock that
 * carries out due cancellations. Started by the worker beside its other background services.
 */
export function simulatorLoops(
  providers: Providers,
  deps: { config: Config; logger: Logger },
  /** What the control plane does with the cancellations billing carried out (terminate the services). */
  hooks: { carryOutCancellations: (today: string) => Promise<number[]> },
): Array<{ name: string; start(): Promise<void>; stop(): Promise<void> }> {
  return providers.billing instanceof BillingSimulator
    ? [new SimulatedBillingClock(hooks.carryOutCancellations, deps.config.SIM_BILLING_INTERVAL, deps.logger)]
    : [];
}
