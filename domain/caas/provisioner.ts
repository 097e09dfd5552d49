import type { Knex } from 'knex';
import type { Providers } from '../../providers';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { findSpace } from './store';

/**
 * Builds an ordered container service (`caas-starter`): its space on the backend (the router that
 * serves its apps by Host, its network) and the record of where that listens. Termination removes
 * its apps' containers and images, its router and its database servers with their data.
 */
export class CaasProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly providers: Providers,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    const space = await this.providers.caas.ensureService(service.id);
    await this.db('caas_services')
      .insert({ service_id: service.id, ip: space.ip, ingress_url: space.ingressUrl })
      .onConflict('service_id')
      .merge(['ip', 'ingress_url']);
    await this.db('services').where({ id: service.id }).update({ primary_ip: space.ip });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    return (await findSpace(this.db, service.id)) !== null;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.providers.caas.destroyService(service.id);
    const servers: Array<{ instance: string }> = await this.db('caas_db_servers').where({ service_id: service.id });
    for (const server of servers) {
      await this.providers.dbaas.destroyInstance(server.instance);
    }
    await this.db('caas_db_servers').where({ service_id: service.id }).delete();
    await this.db('caas_databases').where({ service_id: service.id }).delete();
  }
}
