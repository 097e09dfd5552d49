import { expect } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { provisionTargetOf } from '../domain/provisioning';
import { LbProvisioner } from '../domain/lb/provisioner';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { createService } from './helpers/fixtures';
import { startHostAgent, type HostAgentHandle } from './helpers/hosts';
import { startStack, type Stack } from './helpers/stack';

/**
 * Two host agents on one machine (docs/hosts.md), for test/hosts.*.real.test.ts: the stack's worker
 * is host `h1`, a second worker in the test's process is `h2`, each with its own data directories and
 * address ranges, one database and one Temporal namespace between them. Real HAProxy balancers and
 * PostgreSQL and MariaDB instances are placed on them.
 */
const FAST = { HOST_HEARTBEAT_INTERVAL: '250ms', LB_KEEPER_INTERVAL: '500ms', DBAAS_KEEPER_INTERVAL: '500ms' };

export type Svc = { id: string; serviceId: number };
type HostsBody = { data: Array<{ name: string; status: string; families: string[]; resources: Array<{ object: string; id: string }> }> };

export interface TwoHosts {
  stack: Stack;
  h2: HostAgentHandle;
  /** GET /_dev/hosts. */
  hosts(): Promise<HostsBody>;
  hostOf(id: string): Promise<string | undefined>;
  statusOf(name: string): Promise<string | undefined>;
  /** A balancer, placed and built as an order's provisioning does it, from the API's process (no host). */
  newBalancer(label: string): Promise<Svc>;
  /** A database instance, placed and built through the dev route (what provisioning does). */
  newDatabase(product?: string): Promise<Svc>;
  /** Each host's own directories, read directly. */
  lbDir(host: 'h1' | 'h2'): HaproxyLbProvider;
  dbDir(host: 'h1' | 'h2'): DbInstancesAdapter;
  close(): Promise<void>;
}

export async function startTwoHosts(): Promise<TwoHosts> {
  const stack = await startStack({ env: { LB_BACKEND: 'haproxy', DBAAS_BACKEND: 'instances', HOST_NAME: 'h1', TEARDOWN_SWEEP_INTERVAL: '200ms', ...FAST } });
  await seedOrders(stack.db);
  const h2 = await startHostAgent(stack, 'h2', { HOST_HEARTBEAT_INTERVAL: 250, LB_KEEPER_INTERVAL: 500, DBAAS_KEEPER_INTERVAL: 500 });
  const hosts = async () => (await stack.http.get('/_dev/hosts')).body as HostsBody;
  return {
    stack,
    h2,
    hosts,
    hostOf: async (id) => (await hosts()).data.find((h) => h.resources.some((r) => r.id === id))?.name,
    statusOf: async (name) => (await hosts()).data.find((h) => h.name === name)?.status,
    async newBalancer(label) {
      const svc = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label });
      const target = (await provisionTargetOf(stack.db, svc.serviceId))!;
      await new LbProvisioner(stack.db, stack.api.deps.providers.lb, stack.api.deps.providers.hosts).provision(target);
      return svc;
    },
    async newDatabase(product = 'dbaas-postgres-s') {
      const svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product });
      const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
      expect(attached.status, attached.text).toBe(200);
      return svc;
    },
    lbDir: (host) => new HaproxyLbProvider({ dataDir: host === 'h1' ? stack.config.LB_DATA_DIR : h2.config.LB_DATA_DIR, bindAddress: '127.0.0.1' }),
    dbDir: (host) => new DbInstancesAdapter({ rootDir: host === 'h1' ? stack.config.DBAAS_DATA_DIR! : h2.config.DBAAS_DATA_DIR! }),
    async close() {
      await h2.close();
      await stack.close();
    },
  };
}
