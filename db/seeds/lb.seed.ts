import type { Knex } from 'knex';
import { findBalancer, recordBalancer } from '../../domain/lb/store';
import type { Providers } from '../../providers';
import { BackendRefusedError } from '../../providers/errors';
import type { LbListener } from '../../providers/lb.provider';

/**
 * A running balancer for every live lb service (the seeded `lb-1`, and any ordered locally). A
 * service without one gets a demo listener that puts HAProxy in front of this API (port 8080 on
 * the balancer's address, health-checked on /healthz), so the seeded load balancer moves real
 * traffic; if that port is taken there, it starts without listeners. A service that has one gets it
 * started again with its stored set (after a host restart no HAProxy process is left). Idempotent.
 */
export async function seedLb(db: Knex, providers: Providers, options: { apiPort: number }): Promise<void> {
  const services: Array<{ id: number }> = await db('services').where({ family: 'lb' }).whereIn('status', ['active', 'suspended']).orderBy('id').select('id');
  for (const { id } of services) {
    const serviceId = Number(id);
    const existing = await findBalancer(db, serviceId);
    if (existing) {
      await providers.lb.create(serviceId, existing.listeners);
      continue;
    }
    const demo: LbListener[] = [
      {
        name: 'api',
        protocol: 'http',
        port: 8080,
        algorithm: 'roundrobin',
        health_check: { path: '/healthz', interval_seconds: 5 },
        backends: [{ ip: '127.0.0.1', port: options.apiPort, weight: 1 }],
      },
    ];
    let listeners = demo;
    let status;
    try {
      status = await providers.lb.create(serviceId, demo);
    } catch (err) {
      if (!(err instanceof BackendRefusedError)) throw err;
      listeners = [];
      status = await providers.lb.create(serviceId, listeners);
    }
    await recordBalancer(db, serviceId, status.address, await providers.lb.listeners(serviceId));
  }
}
