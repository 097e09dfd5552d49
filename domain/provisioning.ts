import type { Knex } from 'knex';
import type { Keyring } from '../common/crypto';
import type { Providers } from '../providers';
import { DbaasProvisioner } from './dbaas/provisioner';
import type { Config } from '../common/config';
import { DnsZoneProvisioner, zoneDefaults } from './dns/provisioner';
import { VpsProvisioner } from './vps/provisioner';
import { LbProvisioner } from './lb/provisioner';

/**
 * Provisioning of the services an order creates, one provisioner per product family. A family
 * with a backend of its own registers its provisioner in `createProvisioners`; the others get the
 * generic one over the simulated build backend. Provisioners are domain code: they call providers
 * and keep the control plane's records of what they built.
 */
export interface ProvisionTarget {
  /** Numeric service id (`svc_<n>`). */
  id: number;
  accountId: number;
  /** Family of the Service resource: vps, dns, ..., other. */
  family: string;
  /** The real product family of the catalog (wordpress, images, serverless for `other`). */
  productFamily: string;
  /** Catalog slug. */
  product: string;
  /** Hostname, domain or site name the customer chose, if any. */
  label: string | null;
  /** The order's validated options. */
  options: Record<string, unknown>;
  billingCycle: string | null;
}

export interface ServiceProvisioner {
  /**
   * Starts (or resumes) building the service. Idempotent: activities retry, so a second call for the
   * same service must not build a second one. Throws BackendUnavailableError when the backend is down.
   */
  provision(service: ProvisionTarget): Promise<void>;
  /**
   * True once the service is usable (a hosted site: when the site answers). Throws
   * BackendUnavailableError when the backend cannot be asked.
   */
  isActive(service: ProvisionTarget): Promise<boolean>;
  /**
   * Tears down what `provision` built, after billing terminated the service (the service teardown
   * workflow). Idempotent; nothing to do is not an error.
   */
  deprovision(service: ProvisionTarget): Promise<void>;
}

export class ProvisionerRegistry {
  private readonly byFamily = new Map<string, ServiceProvisioner>();

  constructor(private readonly fallback: ServiceProvisioner) {}

  register(productFamily: string, provisioner: ServiceProvisioner): this {
    this.byFamily.set(productFamily, provisioner);
    return this;
  }

  /** The product family's provisioner, or the generic one. */
  for(productFamily: string): ServiceProvisioner {
    return this.byFamily.get(productFamily) ?? this.fallback;
  }

  has(productFamily: string): boolean {
    return this.byFamily.has(productFamily);
  }
}

/** Builds through the generic build backend; records the address it got once the service is ready. */
export class GenericProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly providers: Pick<Providers, 'builds'>,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    await this.providers.builds.startBuild({ serviceId: service.id, productFamily: service.productFamily });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    const status = await this.providers.builds.buildStatus({ serviceId: service.id, productFamily: service.productFamily });
    if (status.ready && status.primaryIp) {
      await this.db('services').where({ id: service.id }).whereNull('primary_ip').update({ primary_ip: status.primaryIp });
    }
    return status.ready;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.providers.builds.destroy({ serviceId: service.id, productFamily: service.productFamily });
  }
}

/** Every family's provisioner. A family with its own backend adds one line here. */
export function createProvisioners(deps: { db: Knex; providers: Providers; keyring: Keyring; config: Config }): ProvisionerRegistry {
  return new ProvisionerRegistry(new GenericProvisioner(deps.db, deps.providers))
    .register('vps', new VpsProvisioner(deps.db, deps.providers.hypervisor))
    .register('dns', new DnsZoneProvisioner(deps.db, deps.providers.dns, zoneDefaults(deps.config)))
    .register('lb', new LbProvisioner(deps.db, deps.providers.lb))
    .register('dbaas', new DbaasProvisioner(deps.db, deps.providers.dbaas, deps.keyring));
}

/** What a provisioner needs to know about a service an order created (null for seeded services). */
export async function provisionTargetOf(db: Knex, serviceId: number): Promise<ProvisionTarget | null> {
  const row = await db('services')
    .leftJoin('orders', 'orders.id', 'services.order_id')
    .where('services.id', serviceId)
    .select('services.*', 'orders.options')
    .first();
  if (!row) return null;
  return {
    id: Number(row.id),
    accountId: Number(row.account_id),
    family: row.family,
    productFamily: row.product_family ?? row.family,
    product: row.product,
    label: row.label,
    options: row.options ?? {},
    billingCycle: row.billing_cycle,
  };
}
