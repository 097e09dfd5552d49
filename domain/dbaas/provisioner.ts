import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { DbaasProvider } from '../../providers/dbaas.provider';
import type { HostDirectory } from '../../providers/host-routing';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { attachDbaasInstance, detachDbaasInstance, findInstance } from './store';

/**
 * Builds an ordered database service: its own instance of the product's engine, with an `admin`
 * user whose password is generated here and sealed at rest before the engine gets it (it never
 * travels through a workflow). Active once the instance answers. Termination destroys the
 * instance, its data and its backups.
 */
export class DbaasProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly dbaas: DbaasProvider,
    private readonly keyring: Keyring,
    private readonly hosts: HostDirectory,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    await attachDbaasInstance(this.db, { dbaas: this.dbaas, hosts: this.hosts }, this.keyring, { id: service.id, product: service.product });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    const row = await findInstance(this.db, service.id);
    if (!row?.ready_at) return false;
    const status = await this.dbaas.status(row.instance);
    return status.state === 'running';
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    const row = await findInstance(this.db, service.id);
    if (!row) return;
    await this.dbaas.destroyInstance(row.instance);
    await detachDbaasInstance(this.db, service.id);
  }
}
