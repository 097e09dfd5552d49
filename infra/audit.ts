import type { Knex } from 'knex';
import type { Logger } from '../common/logger';
import { isDatabaseUnavailable } from '../db/errors';
import { preparedQuery } from '../db/knex';

export interface AuditEntry {
  request_id: string;
  account_id: number | null;
  method: string;
  path: string;
  route: string | null;
  status: number;
  error_code: string | null;
  scope_required: string | null;
  credential_id: string | null;
  ip: string | null;
  via: 'api' | 'cli' | 'mcp';
  duration_ms: number;
  created_at: Date;
}

/** Request ids named in one "dropped" log line (the count is always complete). */
const DROPPED_IDS_LOGGED = 20;

const COLUMNS = [
  'request_id',
  'account_id',
  'method',
  'path',
  'route',
  'status',
  'error_code',
  'scope_required',
  'credential_id',
  'ip',
  'via',
  'duration_ms',
  'created_at',
] as const satisfies ReadonlyArray<keyof AuditEntry>;
const TYPES = ['text', 'bigint', 'text', 'text', 'text', 'int', 'text', 'text', 'text', 'text', 'text', 'int', 'timestamptz'];
/**
 * A batch as one JSON parameter, whatever its size: JSON.stringify is native, where one array per
 * column had the driver escape every value in JavaScript (3 % of the API's CPU on a cached read),
 * and a multi-row VALUES costs the query builder 13 parameters per row. The entries hold our own
 * strings, the request's path, which Node's parser accepts only in ASCII (it answers 400 to any
 * other byte in the request line), and the client's address (the peer's, or from X-Forwarded-For
 * behind a trusted proxy, read as Latin-1), so none carries a lone surrogate or a NUL that
 * PostgreSQL's JSON parser would refuse. Should one ever be refused, it is left out alone.
 */
const INSERT_BATCH =
  `insert into audit_logs (${COLUMNS.join(', ')}) select ${COLUMNS.join(', ')} ` +
  `from json_to_recordset($1::json) as x(${COLUMNS.map((c, i) => `${c} ${TYPES[i]}`).join(', ')})`;

/**
 * Audit entries are queued in memory as responses finish and written in batches, off the request's
 * hot path. `close()` drains the queue, so a clean shutdown loses none. Entries carry no bodies,
 * headers or query strings, so no secret can reach the audit log.
 *
 * The queue is bounded (AUDIT_QUEUE_MAX): while PostgreSQL does not answer, entries wait and are
 * written when it is back; past the bound new entries are dropped, and the writer says so: an error
 * line with the count and the first request ids of what it dropped, at the first drop and at every
 * failed or successful write after, until the count is reported.
 */
export class AuditWriter {
  private queue: AuditEntry[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;
  /** Dropped since the last report. */
  private droppedIds: string[] = [];
  private droppedCount = 0;
  /** Every entry dropped since the process started. */
  droppedTotal = 0;
  /** Every entry PostgreSQL refused since the process started (never seen: the API writes none it would refuse). */
  refusedTotal = 0;

  constructor(
    private readonly db: Knex,
    private readonly logger: Logger,
    private readonly intervalMs: number,
    private readonly batchSize = 500,
    private readonly maxQueue = 50_000,
    /** How long close() keeps retrying entries PostgreSQL did not take, before it gives them up. */
    private readonly closeRetryMs = 5_000,
  ) {}

  record(entry: AuditEntry): void {
    if (this.queue.length >= this.maxQueue) {
      this.drop(entry);
      return;
    }
    this.queue.push(entry);
    if (this.queue.length >= this.batchSize) void this.flush();
    else if (!this.timer && !this.closed) this.timer = setTimeout(() => void this.flush(), this.intervalMs);
  }

  /** Writes everything queued so far; resolves when it is in PostgreSQL. */
  flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.flushing = this.flushing.then(() => this.writeQueued());
    return this.flushing;
  }

  /**
   * Stops the timer and writes what is queued. While PostgreSQL does not answer it tries again for
   * `closeRetryMs`; what is still unwritten then is lost with the process, and said so in the log.
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    for (let wait = 100, deadline = Date.now() + this.closeRetryMs; this.queue.length > 0 && Date.now() < deadline; wait = Math.min(wait * 2, 1_000)) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(wait, Math.max(0, deadline - Date.now()))));
      await this.flush();
    }
    if (this.queue.length > 0) {
      this.logger.error(
        { lost: this.queue.length, request_ids: this.queue.slice(0, DROPPED_IDS_LOGGED).map((e) => e.request_id) },
        `audit entries not written at shutdown: PostgreSQL did not take them within ${this.closeRetryMs} ms`,
      );
    }
  }

  private drop(entry: AuditEntry): void {
    const first = this.droppedCount === 0;
    this.droppedCount += 1;
    this.droppedTotal += 1;
    if (this.droppedIds.length < DROPPED_IDS_LOGGED) this.droppedIds.push(entry.request_id);
    if (first) this.reportDropped();
  }

  private reportDropped(): void {
    if (this.droppedCount === 0) return;
    this.logger.error(
      { dropped: this.droppedCount, dropped_total: this.droppedTotal, request_ids: this.droppedIds, queue_max: this.maxQueue },
      `audit queue full: dropped ${this.droppedCount} audit entries (not written to audit_logs)`,
    );
    this.droppedCount = 0;
    this.droppedIds = [];
  }

  private async writeQueued(): Promise<void> {
    this.reportDropped();
    while (this.queue.length > 0) {
      let batch = this.queue.splice(0, this.batchSize);
      try {
        await this.insert(batch);
      } catch (err) {
        if (!isDatabaseUnavailable(err)) {
          // PostgreSQL refused the batch's data, not the connection: an entry it will never take
          // must not hold up the others (the batch would come back at the head of the queue forever).
          batch = await this.insertOneByOne(batch);
          if (batch.length === 0) continue;
        }
        // Put the batch back and retry on the next flush rather than dropping audit records.
        this.queue.unshift(...batch);
        this.logger.error({ err: (err as Error).message, pending: this.queue.length }, 'audit write failed; will retry');
        if (!this.closed && !this.timer) this.timer = setTimeout(() => void this.flush(), 1_000);
        return;
      }
    }
  }

  private insert(batch: AuditEntry[]): Promise<unknown> {
    return preparedQuery(this.db, 'audit-insert-batch', INSERT_BATCH, [JSON.stringify(batch)]);
  }

  /** Writes the entries one at a time, leaving out (and logging) any PostgreSQL refuses; returns the rest if it stops answering. */
  private async insertOneByOne(batch: AuditEntry[]): Promise<AuditEntry[]> {
    for (let i = 0; i < batch.length; i++) {
      try {
        await this.insert([batch[i]]);
      } catch (err) {
        if (isDatabaseUnavailable(err)) return batch.slice(i);
        this.refusedTotal += 1;
        this.logger.error({ err: (err as Error).message, request_id: batch[i].request_id }, 'audit entry refused by the database; it is not written');
      }
    }
    return [];
  }
}
