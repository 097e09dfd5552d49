import type { Knex } from 'knex';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { SimulatedBillingClock } from './simulator/billing-clock';
import { backendOf } from '../common/families';
import type { BillingProvider } from './billing.provider';
import type { ServiceBuildProvider } from './builds.provider';
import type { DnsProvider } from './dns.provider';
import type { HypervisorProvider } from './hypervisor.provider';
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
  const dns = withOutageSwitch(createDnsProvider(db, config), switchboard, 'dns');
  return { switchboard, billing, builds, hypervisor, dns, faults: tasks };
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
export function simulatorLoops(providers: Providers, deps: { config: Config; logger: Logger }): Array<{ name: string; start(): Promise<void>; stop(): Promise<void> }> {
  return providers.billing instanceof BillingSimulator ? [new SimulatedBillingClock(providers.billing, deps.config.SIM_BILLING_INTERVAL, deps.logger)] : [];
}
