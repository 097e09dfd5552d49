import type { Knex } from 'knex';
import { placeIfHosted } from '../../domain/hosts/directory';
import { findBalancer, recordBalancer, storeAddress, storeListeners } from '../../domain/lb/store';
import type { Providers } from '../../providers';
import { BackendRefusedError } from '../../providers/errors';
import type { LbBackendTarget, LbListener } from '../../providers/lb.provider';

/** The demo listener's name: a listener of this name with only loopback backends is the seed's own. */
const DEMO_LISTENER = 'web';

const isLoopback = (ip: string) => ip.startsWith('127.') || ip === '::1' || ip.toLowerCase().startsWith('::ffff:127.');

function demoListener(backends: LbBackendTarget[]): LbListener {
  return {
    name: DEMO_LISTENER,
    protocol: 'http',
    port: 8080,
    algorithm: 'roundrobin',
    health_check: { path: '/healthz', interval_seconds: 5 },
    backends,
  };
}

/**
 * The seed's demo listeners, brought up to date: `web` follows the demo web servers of this run
 * (`npm start` starts them on ports found free, so they move between runs), and the `api` listener
 * earlier seeds put in front of the API itself becomes `web` (a balancer may no longer reach the
 * platform's own ports). Listeners the user made are kept as they are.
 */
function refreshDemo(listeners: LbListener[], demoBackends: LbBackendTarget[], apiPort: number): LbListener[] {
  return listeners.map((l) => {
    const oldApiDemo = l.name === 'api' && l.backends.length === 1 && isLoopback(l.backends[0].ip) && l.backends[0].port === apiPort;
    const webDemo = l.name === DEMO_LISTENER && l.backends.every((b) => isLoopback(b.ip));
    return (oldApiDemo || webDemo) && demoBackends.length ? { ...demoListener(demoBackends), port: l.port } : l;
  });
}

/**
 * A running balancer for every live lb service (the seeded `lb-1`, and any ordered locally). A
 * service without one gets a demo listener `web` (port 8080 on the balancer's address,
 * health-checked on /healthz) in front of the demo web servers `npm start` runs (`demoBackends`), so
 * the seeded load balancer moves real traffic; if that port is taken there, or no demo servers are
 * given, it starts without listeners. A service that has one gets it started again with its stored
 * set (after a host restart no HAProxy process is left), its demo listener pointed at this run's
 * demo servers. Idempotent.
 */
export async function seedLb(db: Knex, providers: Providers, options: { apiPort: number; demoBackends?: LbBackendTarget[] }): Promise<void> {
  const demoBackends = options.demoBackends ?? [];
  const services: Array<{ id: number }> = await db('services').where({ family: 'lb' }).whereIn('status', ['active', 'suspended']).orderBy('id').select('id');
  for (const { id } of services) {
    const serviceId = Number(id);
    await placeIfHosted(db, providers.hosts, 'lb', serviceId);
    const existing = await findBalancer(db, serviceId);
    if (existing) {
      const status = await providers.lb.create(serviceId, existing.listeners);
      // Every checkout shares the database: a balancer another checkout's run recorded is started
      // here in this run's range, and its record follows.
      await storeAddress(db, serviceId, status.address);
      const listeners = refreshDemo(existing.listeners, demoBackends, options.apiPort);
      if (JSON.stringify(listeners) !== JSON.stringify(existing.listeners)) {
        const applied = await providers.lb.apply(serviceId, listeners).catch((err: unknown) => {
          if (err instanceof BackendRefusedError) return null;
          throw err;
        });
        if (applied) await db.transaction((trx) => storeListeners(trx, serviceId, applied));
      }
      continue;
    }
    let status;
    try {
      status = await providers.lb.create(serviceId, demoBackends.length ? [demoListener(demoBackends)] : []);
    } catch (err) {
      if (!(err instanceof BackendRefusedError)) throw err;
      status = await providers.lb.create(serviceId, []);
    }
    await recordBalancer(db, serviceId, status.address, await providers.lb.listeners(serviceId));
  }
}
