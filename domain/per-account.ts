import type { Knex } from 'knex';
import { DomainError } from './errors';

/**
 * Products an account holds one of at a time (DECISIONS "Data planes and outbound fetches": object
 * storage, mail gateway, images, each serverless primitive): ordering another while one is live, or
 * while an order of one is not paid yet, is refused before billing with `409 already_exists`, param
 * `product`. `productFamily` is the catalog family (`objectstorage`, `images`).
 */
/** Statuses in which an account holds such a product (its service is not terminated or cancelled). */
export const LIVE_STATUSES = ['active', 'pending', 'suspended', 'fraud', 'unknown'] as const;

export async function refuseSecondOf(db: Knex | Knex.Transaction, accountId: number, productFamily: string, what: string): Promise<void> {
  const live = await db('services')
    .where({ account_id: accountId })
    .where((w) => w.where('family', productFamily).orWhere('product_family', productFamily))
    .whereIn('status', [...LIVE_STATUSES])
    .first('id');
  const ordered = await db('orders')
    .join('products', 'products.id', 'orders.product_id')
    .where({ 'orders.account_id': accountId, 'orders.status': 'pending', 'products.product_family': productFamily })
    .first('orders.id');
  if (live || ordered) {
    throw new DomainError(409, 'invalid_request_error', 'already_exists', `This account has ${what} already (one per account).`, 'product');
  }
}

/** The order-time hook of such a product: checked before billing, and again under the account's lock where the order is written. */
export function onePerAccount(productFamily: string, what: string) {
  return async (db: Knex, options: Record<string, unknown>, account: { id: number }) => {
    await refuseSecondOf(db, account.id, productFamily, what);
    return {
      options,
      hold: async (trx: Knex.Transaction) => {
        // One order of the account at a time gets here: the second waits, then sees the first.
        await trx('accounts').where({ id: account.id }).forUpdate().first();
        await refuseSecondOf(trx, account.id, productFamily, what);
      },
    };
  };
}
