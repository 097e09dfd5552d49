import type { Knex } from 'knex';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { BACKEND_FAMILIES, simulatedDelay, type BackendFamily, type BackendSwitchboard } from '../switchboard';

/** How long the simulated backend takes to bring a service up, at SIM_DELAY_SCALE 1. */
const BUILD_MS: Record<string, number> = {
  vps: 60_000,
  dns: 2_000,
  dbaas: 45_000,
  caas: 30_000,
  lb: 20_000,
  objectstorage: 5_000,
  mailgateway: 5_000,
  wordpress: 90_000,
  images: 5_000,
  serverless: 5_000,
};

/** Families whose simulated services get a public address. */
const WITH_IP = new Set(['vps', 'dbaas', 'caas', 'lb', 'wordpress']);

export function backendOf(productFamily: string): BackendFamily {
  return (BACKEND_FAMILIES as readonly string[]).includes(productFamily) ? (productFamily as BackendFamily) : 'billing';
}

/**
 * The generic provisioner: records a build job whose completion lies `BUILD_MS × SIM_DELAY_SCALE`
 * ahead; `isActive` is true once that time has passed. The product family's backend switch
 * (POST /_dev/backends/{family}/outage) makes both calls fail like an unreachable backend, so an
 * order can be kept from ever becoming active.
 */
export class SimulatedProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly switchboard: BackendSwitchboard,
    private readonly delayScale: number,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    const backend = backendOf(service.productFamily);
    await this.switchboard.assertUp(backend);
    await simulatedDelay(200, this.delayScale);
    const buildMs = Math.round((BUILD_MS[service.productFamily] ?? 10_000) * this.delayScale);
    const ip = WITH_IP.has(service.productFamily) ? `198.51.100.${(service.id % 250) + 1}` : null;
    await this.db('sim_provisioning')
      .insert({ service_id: service.id, backend, ready_at: new Date(Date.now() + buildMs), primary_ip: ip })
      .onConflict('service_id')
      .ignore();
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    await this.switchboard.assertUp(backendOf(service.productFamily));
    const job = await this.db('sim_provisioning').where({ service_id: service.id }).first();
    if (!job || new Date(job.ready_at).getTime() > Date.now()) return false;
    if (job.primary_ip) await this.db('services').where({ id: service.id }).whereNull('primary_ip').update({ primary_ip: job.primary_ip });
    return true;
  }
}
