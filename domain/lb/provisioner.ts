import type { Knex } from 'knex';
import type { HostDirectory } from '../../providers/host-routing';
import type { LbProvider } from '../../providers/lb.provider';
import { placeIfHosted } from '../hosts/directory';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { findBalancer, forgetBalancer, recordBalancer } from './store';

/**
 * Builds an ordered load balancer: a balancer on the backend (an HAProxy process) with no listeners
 * yet, and the control plane's record of it. Active once the balancer runs. Its address becomes the
 * service's `primary_ip`. Termination destroys the balancer and forgets it.
 */
export class LbProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly lb: LbProvider,
    private readonly hosts: HostDirectory,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    // On a host first (when balancers run on hosts): the create below runs there.
    await placeIfHosted(this.db, this.hosts, 'lb', service.id);
    const existing = await findBalancer(this.db, service.id);
    // A retried call keeps what was built: the backend's create is idempotent, and the record too.
    const status = await this.lb.create(service.id, existing?.listeners ?? []);
    await recordBalancer(this.db, service.id, status.address, existing?.listeners ?? []);
    await this.db('services').where({ id: service.id }).whereNull('primary_ip').update({ primary_ip: status.address });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    if (!(await findBalancer(this.db, service.id))) return false;
    return (await this.lb.status(service.id)).state === 'running';
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.lb.destroy(service.id);
    await forgetBalancer(this.db, service.id);
  }
}
