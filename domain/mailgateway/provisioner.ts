import type { Knex } from 'knex';
import { onePerAccount } from '../per-account';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { findGateway } from './store';

/**
 * Builds an ordered mail gateway: its record (plan, the `/emails` data plane's URL). Domains, keys
 * and the SMTP credential are the account's to add. Termination revokes every sending key and
 * deactivates the SMTP credential at once; mail already accepted is still delivered.
 */
export class MailGatewayProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly apiEndpoint: string,
  ) {}

  readonly prepareOrder = onePerAccount('mailgateway', 'a mail gateway (under /v1/mail-gateway)');

  async provision(service: ProvisionTarget): Promise<void> {
    await this.db('mail_gateways')
      .insert({ service_id: service.id, account_id: service.accountId, plan: service.product, api_endpoint: this.apiEndpoint })
      .onConflict('service_id')
      .ignore();
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    return (await findGateway(this.db, service.id)) !== null;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.db.transaction(async (trx) => {
      await trx('mail_keys').where({ service_id: service.id }).whereNull('revoked_at').update({ revoked_at: trx.fn.now() });
      await trx('mail_smtp_credentials').where({ service_id: service.id }).whereNull('deactivated_at').update({ deactivated_at: trx.fn.now() });
    });
  }
}

/** The `/emails` data plane's URL for a configuration. */
export const mailEndpointOf = (config: { MAIL_API_ENDPOINT?: string; MAIL_PORT: number }): string =>
  (config.MAIL_API_ENDPOINT ?? `http://127.0.0.1:${config.MAIL_PORT}`).replace(/\/$/, '');
