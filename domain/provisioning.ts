import type { Knex } from 'knex';
import type { Keyring } from '../common/crypto';
import type { Providers } from '../providers';
import type { Config } from '../common/config';

/**
 * Provisioning of the services an order creates, one provisioner per product family. A family
 * with a backend of its own gives its provisioner in its manifest (families/<family>.ts); the others get the
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
  /**
   * Optional order-time hook (domain/orders/place.ts): checks and normalises the family's options
   * before billing sees the order, so that the orders code names no family. Throws a DomainError to
   * refuse the order; `hold` runs in the transaction that writes the order, to check again there.
   */
  prepareOrder?(db: Knex, options: Record<string, unknown>, account: { id: number }, product: { slug: string }): Promise<PreparedOrder>;
}

/** What a family's `prepareOrder` hook gives back: the options to store, and a check made where the order is written. */
export interface PreparedOrder {
  options: Record<string, unknown>;
  hold?: (trx: Knex.Transaction) => Promise<void>;
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

/** What a family's provisioner is built over. */
export interface ProvisionerDeps {
  db: Knex;
  providers: Providers;
  keyring: Keyring;
  config: Config;
}

/** A family that may build its services itself: its manifest's name and provisioner (families/<family>.ts). */
export interface ProvisioningFamily {
  name: string;
  provisioner?: (deps: ProvisionerDeps) => ServiceProvisioner;
}

/**
 * Every family's provisioner, from the families' manifests (the API and the worker pass the list of
 * families/index.ts; the domain does not import it). The others get the generic one.
 */
export function createProvisioners(deps: ProvisionerDeps, families: readonly ProvisioningFamily[]): ProvisionerRegistry {
  const registry = new ProvisionerRegistry(new GenericProvisioner(deps.db, deps.providers));
  for (const family of families) if (family.provisioner) registry.register(family.name, family.provisioner(deps));
  return registry;
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
