import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import { onePerAccount } from '../per-account';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { primitiveOfProduct, type Primitive } from './plans';
import { findTenant } from './store';

const WHAT: Record<Primitive, string> = {
  cron: 'a serverless cron service (under /v1/serverless/cron)',
  db: 'a serverless database service (under /v1/serverless/db)',
  functions: 'a serverless functions service (under /v1/serverless/functions)',
  kv: 'a serverless key-value service (under /v1/serverless/kv)',
};

function primitiveOf(product: string): Primitive {
  const primitive = primitiveOfProduct(product);
  if (!primitive) throw new Error(`${product} is not a serverless product`);
  return primitive;
}

/** Every product of a primitive (its catalog product and the plans an operator may give): one of them per account. */
const productsOfKind = (product: string): string[] => {
  const primitive = primitiveOf(product);
  return [`serverless-${primitive}`, `serverless-${primitive}-free`];
};

/**
 * Builds an ordered serverless primitive: the tenant record (its handle, plan and data plane URL).
 * The data planes are the project's own and make the tenant's backend resources on first use (a
 * Redis ACL user, a folder of SQLite files, a workerd process). Termination retires every token at
 * once and stops the cron schedules from sending; the data plane then removes the tenant's data
 * (dataplane/serverless/reaper.ts) and marks it `dropped_at`.
 */
export class ServerlessProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly baseEndpoint: string,
  ) {}

  readonly prepareOrder = onePerAccount('serverless', (product) => WHAT[primitiveOf(product)], productsOfKind);

  async provision(service: ProvisionTarget): Promise<void> {
    const primitive = primitiveOf(service.product);
    await this.db('serverless_tenants')
      .insert({
        service_id: service.id,
        account_id: service.accountId,
        primitive,
        handle: `s${randomBytes(6).toString('hex')}`,
        plan: service.product,
        api_endpoint: endpointOf(this.baseEndpoint, primitive),
      })
      .onConflict('service_id')
      .ignore();
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    return (await findTenant(this.db, service.id)) !== null;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.db.transaction(async (trx) => {
      await trx('serverless_tokens')
        .where({ service_id: service.id })
        .where((w) => w.whereNull('retired_at').orWhere('retired_at', '>', trx.fn.now()))
        .update({ retired_at: trx.fn.now() });
      await trx('serverless_cron_schedules').where({ service_id: service.id }).whereNull('deleted_at').update({ deleted_at: trx.fn.now() });
    });
  }
}

/** The data planes' base URL for a configuration (each primitive's `api_endpoint` is `<base>/<primitive>`). */
export const serverlessBaseOf = (config: { SERVERLESS_API_ENDPOINT?: string; SERVERLESS_PORT: number }): string =>
  (config.SERVERLESS_API_ENDPOINT ?? `http://127.0.0.1:${config.SERVERLESS_PORT}`).replace(/\/$/, '');

export const endpointOf = (base: string, primitive: Primitive): string => `${base}/${primitive}`;
