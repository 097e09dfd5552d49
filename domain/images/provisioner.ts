import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { onePerAccount } from '../per-account';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { ensureSecret } from './manage';
import { findTenant } from './store';

/**
 * Builds an ordered image service: the tenant (its handle in signed URLs, its plan, the delivery
 * plane's URL) and its first signing secret. The delivery plane is the project's own: nothing else
 * to build. Termination retires every delivery token at once; the delivery plane also refuses a
 * tenant whose service is not active.
 */
export class ImagesProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly keyring: Keyring,
    private readonly apiEndpoint: string,
  ) {}

  readonly prepareOrder = onePerAccount('images', 'an image service (under /v1/images)');

  async provision(service: ProvisionTarget): Promise<void> {
    await this.db.transaction(async (trx) => {
      await trx('images_tenants')
        .insert({
          service_id: service.id,
          account_id: service.accountId,
          tenant: `t${randomBytes(6).toString('hex')}`,
          plan: service.product,
          api_endpoint: this.apiEndpoint,
        })
        .onConflict('service_id')
        .ignore();
      await ensureSecret(trx, this.keyring, service.id);
    });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    return (await findTenant(this.db, service.id)) !== null;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.db('images_tokens').where({ service_id: service.id }).whereNull('retired_at').update({ retired_at: this.db.fn.now() });
  }
}

/** The delivery plane's URL for a configuration. */
export const imagesEndpointOf = (config: { IMAGES_API_ENDPOINT?: string; IMAGES_PORT: number }): string =>
  (config.IMAGES_API_ENDPOINT ?? `http://127.0.0.1:${config.IMAGES_PORT}`).replace(/\/$/, '');
