import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { provisionTargetOf, type ProvisionerRegistry } from '../../domain/provisioning';
import { markDeprovisioned } from '../../domain/services';
import { releaseService } from '../../domain/hosts/directory';

/** Activities of the service lifecycle beyond orders: teardown after termination. */
export function createServiceActivities({ db, provisioners, logger }: { db: Knex; provisioners: ProvisionerRegistry; logger: Logger }) {
  return {
    /** Deprovisions a terminated service through its family's provisioner, then marks it done. Idempotent. */
    async deprovisionService(input: { serviceId: number }): Promise<void> {
      const target = await provisionTargetOf(db, input.serviceId);
      if (!target) return;
      await provisioners.for(target.productFamily).deprovision(target);
      await releaseService(db, input.serviceId);
      await markDeprovisioned(db, input.serviceId);
      logger.info({ service: `svc_${input.serviceId}`, family: target.productFamily }, 'service torn down');
    },
  };
}

export type ServiceActivities = ReturnType<typeof createServiceActivities>;
