import type { Knex } from 'knex';
import { DomainError } from './errors';

/**
 * Products an account holds one of at a time (DECISIONS "Data planes and outbound fetches": object
 * storage, mail gateway, images, each serverless primitive): ordering another while one is live, or
 * while an order of one is not paid yet, is refused before billing with `409 already_exists`, param
 * `product`. `productFamily` is the catalog family (`objectstorage`, `images`); `sameKind` (serverless)
 * narrows it to the ordered product's kind.
 */
/** Statuses in which an account holds such a product (its service is not terminated or cancelled). */
export const LIVE_STATUSES = ['active', 'pending', 'suspended', 'fraud', 'unknown'] as const;

/**
 * What an account holds one of: a catalog family (`images`), or, where a family sells several such
 * products (the serverless primitives), the products of one kind (`sameKind` of the ordered slug).
 */
export type OneOf = string | { productFamily: string; products: readonly string[] };

export async function refuseSecondOf(db: Knex | Knex.Transaction, accountId: number, of: OneOf, what: string): Promise<void> {
  const liveQuery = db('services')
    .where({ account_id: accountId })
    .whereIn('status', [...LIVE_STATUSES]);
  const orderedQuery = db('orders').join('products', 'products.id', 'orders.product_id').where({ 'orders.account_id': accountId, 'orders.status': 'pending' });
  if (typeof of === 'string') {
    liveQuery.where((w) => w.where('family', of).orWhere('product_family', of));
    orderedQuery.where('products.product_family', of);
  } else {
    liveQuery.where('product_family', of.productFamily).whereIn('product', [...of.products]);
    orderedQuery.where('products.product_family', of.productFamily).whereIn('products.slug', [...of.products]);
  }
  const live = await liveQuery.first('id');
  const ordered = await orderedQuery.first('orders.id');
  if (live || ordered) {
    throw new DomainError(409, 'invalid_request_error', 'already_exists', `This account has ${what} already (one per account).`, 'product');
  }
}

/** The order-time hook of such a product: checked before billing, and again under the account's lock where the order is written. */
export function onePerAccount(productFamily: string, what: string | ((product: string) => string), sameKind?: (product: string) => readonly string[]) {
  return async (db: Knex, options: Record<string, unknown>, account: { id: number }, product: { slug: string }) => {
    const of: OneOf = sameKind ? { productFamily, products: sameKind(product.slug) } : productFamily;
    const name = typeof what === 'string' ? what : what(product.slug);
    await refuseSecondOf(db, account.id, of, name);
    return {
      options,
      hold: async (trx: Knex.Transaction) => {
        // One order of the account at a time gets here: the second waits, then sees the first.
        await trx('accounts').where({ id: account.id }).forUpdate().first();
        await refuseSecondOf(trx, account.id, of, name);
      },
    };
  };
}
