import type { ObjectStorageActivities } from '../../activities/objectstorage/activities';
import { familyActivitiesOnHost, placement, whenHostAnswers, type HostWait } from '../kit/hosts';
import type { OperationInput } from '../kit/operation';
import { runOperation } from '../kit/steps';
import { bookkeeping, OBJECT_STORAGE_SERVER } from './steps';

export interface ObjectStorageEmptyInput extends OperationInput {
  serviceId: number;
  bucket: string;
}

/**
 * `objectstorage.empty`: deletes every object of a bucket, a page at a time, on the host of the
 * account's server, and keeps the bucket. `result.deleted` counts the objects deleted so far (each
 * page once, also when a worker died in the middle of one: activities/objectstorage/activities.ts).
 * Objects put while it runs are deleted too, up to the page that finds the bucket empty.
 */
export async function objectStorageEmptyWorkflow(input: ObjectStorageEmptyInput): Promise<void> {
  const result = { deleted: 0 };
  await runOperation(
    input,
    { backend: OBJECT_STORAGE_SERVER, step: 'empty', result, cleanup: () => bookkeeping.objectStorageEmptyForget({ operationId: input.operationId }) },
    async (run) => {
      const { host } = await placement.hostOfService(input.serviceId);
      const on = familyActivitiesOnHost<ObjectStorageActivities>(host);
      const tell = (wait: HostWait | null) => run.tracker.update({ result: wait ? { ...run.result, waiting: wait } : run.result });
      for (let page = 0; ; page++) {
        const out = await whenHostAnswers(host, tell, () =>
          on.waits.objectStorageEmptyPage({ operationId: input.operationId, page, serviceId: input.serviceId, bucket: input.bucket }),
        );
        if (out.done) break;
        run.result = { deleted: run.result.deleted + out.deleted };
        // No total is known up front: progress creeps toward 99 and the count says how far it got.
        await run.progress(Math.min(99, Math.round(100 * (1 - 1 / (page + 2)))));
      }
      return run.result;
    },
  );
}
