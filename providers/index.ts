import type { Knex } from 'knex';
import { defaultServerDataDir, type Config } from '../common/config';
import type { Logger } from '../common/logger';
import { SimulatedBillingClock } from './simulator/billing-clock';
import { backendOf } from '../common/families';
import type { BillingProvider } from './billing.provider';
import type { ServiceBuildProvider } from './builds.provider';
import type { DbaasProvider } from './dbaas.provider';
import { DbInstancesAdapter } from './dbinstances/dbinstances.adapter';
import { DbaasSimulator } from './simulator/dbaas.simulator';
import type { HypervisorProvider } from './hypervisor.provider';
import { HaproxyLbProvider } from './haproxy/haproxy.adapter';
import type { LbProvider } from './lb.provider';
import type { BackendTargetPolicySource } from './lb.rules';
import { platformTargets } from './lb.targets';
import { localServicePorts } from '../common/platform-ports';
import { LbSimulator } from './simulator/lb.simulator';
import type { DnsProvider } from './dns.provider';
import { PowerDnsAdapter } from './powerdns/powerdns.adapter';
import { readApiKey } from './powerdns/powerdns.server';
import { DnsSimulator } from './simulator/dns.simulator';
import { BillingSimulator } from './simulator/billing.simulator';
import { BuildSimulator } from './simulator/build.simulator';
import { HypervisorSimulator } from './simulator/hypervisor.simulator';
import { SimulatedTasks } from './simulator/task-engine';
import { BackendSwitchboard, withOutageSwitch, type BackendFamily } from './switchboard';

/**
 * Every backend the control plane talks to, behind its provider interface. Each is built here from
 * configuration (the real adapter where one exists, else the simulator) and wrapped once in its
 * outage switch, so faults never fork a provider. Families register their provider here.
 */
export interface Providers {
  switchboard: BackendSwitchboard;
  billing: BillingProvider;
  /** Builds services of the families without a backend of their own (domain/provisioning.ts). */
  builds: ServiceBuildProvider;
  /** VPS machines (qemu and lxc) on the hypervisor cluster. */
  hypervisor: HypervisorProvider;
  /** Load balancers: one HAProxy process each (LB_BACKEND=haproxy) or the simulator. */
  lb: LbProvider;
  /** Where load-balancer backends may point right now (platform ports and addresses, ALLOW_INSECURE_TARGETS). */
  lbTargets: BackendTargetPolicySource;
  /** Database instances of the DBaaS family (DBAAS_BACKEND: real servers on this machine, or the simulator). */
  dbaas: DbaasProvider;
  /** DNS zones and records on the authoritative server (PowerDNS, or the simulator with DNS_BACKEND=simulator). */
  dns: DnsProvider;
  /** Fault injection into simulated backends' tasks (dev routes, tests); null when none is simulated. */
  faults: FaultInjector | null;
}

export interface FaultInjector {
  /** The subject's next task (of `kind`, when given) on that backend ends in error, without effect. */
  failNext(backend: BackendFamily, subject: string | number, opts?: { kind?: string; message?: string }): Promise<void>;
}

export function createProviders({ db, config }: { db: Knex; config: Config }): Providers {
  const switchboard = new BackendSwitchboard(db);
  const tasks = new SimulatedTasks(db, config.SIM_DELAY_SCALE);
  const billing = new BillingSimulator(db, switchboard, config.SIM_DELAY_SCALE);
  const builds = withOutageSwitch(new BuildSimulator(db, tasks), switchboard, ([target]) => backendOf((target as { productFamily: string }).productFamily));
  const hypervisor = withOutageSwitch(new HypervisorSimulator(db, tasks), switchboard, 'vps');
  const dbInstances =
    config.DBAAS_BACKEND === 'simulator'
      ? null
      : new DbInstancesAdapter({ rootDir: config.DBAAS_DATA_DIR ?? defaultServerDataDir('dbaas'), addressRange: config.DBAAS_ADDRESS_RANGE });
  const dbaas = withOutageSwitch(dbInstances ?? new DbaasSimulator(db, tasks), switchboard, 'dbaas');
  const lbTargets = lbTargetsOf(config, dbInstances);
  const lb = withOutageSwitch(
    config.LB_BACKEND === 'simulator'
      ? new LbSimulator(db, { bindAddress: config.LB_BIND_ADDRESS, delayScale: config.SIM_DELAY_SCALE })
      : new HaproxyLbProvider({ dataDir: config.LB_DATA_DIR, bindAddress: config.LB_BIND_ADDRESS, targets: lbTargets }),
    switchboard,
    'lb',
  );
  const dns = withOutageSwitch(createDnsProvider(db, config), switchboard, 'dns');
  return { switchboard, billing, builds, hypervisor, dns, lb, lbTargets, dbaas, faults: tasks };
}

/**
 * Where load-balancer backends may point (docs/lb.md "Backend addresses"): the API checks a change
 * with it, the HAProxy adapter every configuration it renders. The database instances' ports are
 * read from the instances themselves, outside their outage switch (a switched-off family still
 * listens).
 */
function lbTargetsOf(config: Config, dbInstances: DbInstancesAdapter | null): BackendTargetPolicySource {
  return platformTargets({
    allowLoopback: config.WEBHOOK_ALLOW_INSECURE_TARGETS,
    platformRanges: [
      { range: config.LB_BIND_ADDRESS, what: "the platform's load balancers" },
      { range: config.DBAAS_ADDRESS_RANGE, what: "the platform's database instances" },
    ],
    configuredPorts: localServicePorts(config),
    dynamicPorts: dbInstances ? [() => dbInstances.listeningPorts()] : [],
  });
}

function createDnsProvider(db: Knex, config: Config): DnsProvider {
  if (config.DNS_BACKEND === 'simulator') return new DnsSimulator(db, config.SIM_DELAY_SCALE);
  return new PowerDnsAdapter({
    apiUrl: config.POWERDNS_API_URL,
    // Read when first needed: `npm start` generates the key file when it starts the local server.
    apiKey: () => config.POWERDNS_API_KEY ?? readApiKey(config.POWERDNS_DATA_DIR),
    timeoutMs: config.POWERDNS_TIMEOUT,
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
