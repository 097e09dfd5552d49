/**
 * Provisioning of the services an order creates, one provisioner per family of the Service
 * resource. Families whose own provider is not built yet get the generic simulated provisioner
 * (providers/simulator/provisioning.simulator.ts); a family registers its real one with
 * `registry.register('<family>', provisioner)` in providers/index.ts.
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
}

export class ProvisionerRegistry {
  private readonly byFamily = new Map<string, ServiceProvisioner>();

  constructor(private readonly fallback: ServiceProvisioner) {}

  register(family: string, provisioner: ServiceProvisioner): void {
    this.byFamily.set(family, provisioner);
  }

  /** The family's provisioner, or the generic simulated one. */
  for(family: string): ServiceProvisioner {
    return this.byFamily.get(family) ?? this.fallback;
  }

  has(family: string): boolean {
    return this.byFamily.has(family);
  }
}
