import { heartbeat } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Providers } from '../../providers';

/** Keys deleted per page of `objectstorage.empty` (one S3 DeleteObjects request). */
export const EMPTY_PAGE = 1000;

/**
 * Activities of `objectstorage.empty`. They run on the host of the account's server (the workflow
 * sends them to its queue). A page's keys are written to PostgreSQL before they are deleted, so a
 * page retried after a worker died mid-way deletes the same keys again (deleting is idempotent) and
 * counts them once: the operation's `deleted` is exact.
 */
export function createObjectStorageActivities({ db, providers }: { db: Knex; providers: Providers }) {
  return {
    /** Deletes page `page` of the bucket (its first EMPTY_PAGE keys, chosen at the first attempt); `done` when the bucket had none left. */
    async objectStorageEmptyPage(input: { operationId: string; page: number; serviceId: number; bucket: string }): Promise<{ deleted: number; done: boolean }> {
      const where = { operation_id: input.operationId, page: input.page };
      const journal = await db('objectstorage_empty_pages').where(where).first();
      let keys: string[];
      if (journal) {
        keys = journal.keys as string[];
      } else {
        keys = await providers.objectstorage.listKeys(input.serviceId, input.bucket, EMPTY_PAGE);
        await db('objectstorage_empty_pages')
          .insert({ ...where, keys: JSON.stringify(keys) })
          .onConflict(['operation_id', 'page'])
          .ignore();
        keys = ((await db('objectstorage_empty_pages').where(where).first()).keys as string[]) ?? keys;
      }
      heartbeat({ page: input.page, keys: keys.length });
      if (keys.length > 0) await providers.objectstorage.removeKeys(input.serviceId, input.bucket, keys);
      return { deleted: keys.length, done: keys.length === 0 };
    },

    /** Drops the operation's page journal (when it ends, whatever the outcome). */
    async objectStorageEmptyForget(input: { operationId: string }): Promise<void> {
      await db('objectstorage_empty_pages').where({ operation_id: input.operationId }).delete();
    },
  };
}

export type ObjectStorageActivities = ReturnType<typeof createObjectStorageActivities>;
