import type { Knex } from 'knex';
import type { ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { bucketsOf, type StorageRow } from './store';

/**
 * Usage snapshots (SPEC: metrics "one point per UTC day"; the singleton's totals "come from the
 * latest daily snapshot"). A snapshot reads, for every bucket of an account, the bytes and objects
 * stored (from a listing: the server's own size gauge lags and keeps deleted buckets) and the
 * server's counters of bytes sent and requests, which count from the server's start. Each UTC day
 * gets the counters' growth since the previous reading; a reading of another server run (after a
 * restart) counts from zero. Taking today's snapshot again replaces its stored figures and adds
 * only what the counters grew meanwhile.
 */
export const utcDay = (at: Date = new Date()): string => at.toISOString().slice(0, 10);

export async function takeSnapshot(db: Knex, objectstorage: ObjectStorageProvider, storage: StorageRow, at: Date = new Date()): Promise<void> {
  const day = utcDay(at);
  const buckets = (await bucketsOf(db, storage.service_id)).map((b) => b.name);
  const reading = await objectstorage.usage(storage.service_id, buckets);
  await db.transaction(async (trx) => {
    let storageBytes = 0;
    let objectCount = 0;
    for (const [bucket, usage] of Object.entries(reading.buckets)) {
      storageBytes += usage.storageBytes;
      objectCount += usage.objectCount;
      const last = await trx('objectstorage_counter_readings').where({ service_id: storage.service_id, bucket }).forUpdate().first();
      const grown = (now: number, before: number | undefined) =>
        last && last.epoch === reading.epoch && before !== undefined && now >= before ? now - before : now;
      const sent = grown(usage.bytesSent, last ? Number(last.bytes_sent) : undefined);
      const requests = grown(usage.requests, last ? Number(last.requests) : undefined);
      await trx('objectstorage_counter_readings')
        .insert({ service_id: storage.service_id, bucket, epoch: reading.epoch, bytes_sent: usage.bytesSent, requests: usage.requests })
        .onConflict(['service_id', 'bucket'])
        .merge();
      await trx('objectstorage_bucket_days')
        .insert({
          service_id: storage.service_id,
          bucket,
          day,
          storage_bytes: usage.storageBytes,
          object_count: usage.objectCount,
          egress_bytes: sent,
          requests,
        })
        .onConflict(['service_id', 'bucket', 'day'])
        .merge({
          storage_bytes: usage.storageBytes,
          object_count: usage.objectCount,
          egress_bytes: trx.raw('objectstorage_bucket_days.egress_bytes + ?', [sent]),
          requests: trx.raw('objectstorage_bucket_days.requests + ?', [requests]),
          taken_at: trx.fn.now(),
        });
    }
    await trx('objectstorage_snapshots')
      .insert({ service_id: storage.service_id, day, storage_bytes: storageBytes, object_count: objectCount })
      .onConflict(['service_id', 'day'])
      .merge({ storage_bytes: storageBytes, object_count: objectCount, taken_at: trx.fn.now() });
  });
}

export async function latestSnapshot(db: Knex, serviceId: number): Promise<{ day: string; storage_bytes: number; object_count: number } | null> {
  const row = await db('objectstorage_snapshots').where({ service_id: serviceId }).orderBy('day', 'desc').first();
  return row ? { day: dayText(row.day), storage_bytes: Number(row.storage_bytes), object_count: Number(row.object_count) } : null;
}

export interface MetricPoint {
  date: string;
  value: number;
}

/** The bucket's points from `from` to `to` (UTC dates, inclusive), ascending. */
export async function bucketSeries(
  db: Knex,
  serviceId: number,
  bucket: string,
  from: string,
  to: string,
): Promise<{ storage: MetricPoint[]; egress: MetricPoint[]; requests: MetricPoint[] }> {
  const rows = await db('objectstorage_bucket_days').where({ service_id: serviceId, bucket }).whereBetween('day', [from, to]).orderBy('day');
  const series = (column: string) => rows.map((r: Record<string, unknown>) => ({ date: dayText(r.day), value: Number(r[column]) }));
  return { storage: series('storage_bytes'), egress: series('egress_bytes'), requests: series('requests') };
}

/** A `date` column as `YYYY-MM-DD` (node-postgres may hand it over as a Date at local midnight, or as text). */
function dayText(value: unknown): string {
  if (typeof value === 'string') return value.slice(0, 10);
  const d = value as Date;
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}
