import type { Knex } from 'knex';
import type { Logger } from '../common/logger';
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

const COLUMNS = ['request_id', 'account_id', 'method', 'path', 'route', 'status', 'error_code', 'scope_required', 'credential_id', 'ip', 'via', 'duration_ms', 'created_at'] as const satisfies ReadonlyArray<keyof AuditEntry>;
const TYPES = ['text', 'bigint', 'text', 'text', 'text', 'int', 'text', 'text', 'text', 'text', 'text', 'int', 'timestamptz'];
/** A batch as one array per column: 13 parameters whatever its size (a multi-row VALUES costs the query builder 13 per row). */
const INSERT_BATCH = `insert into audit_logs (${COLUMNS.join(', ')}) select * from unnest(${TYPES.map((t, i) => `$${i + 1}::${t}[]`).join(', ')})`;

/**
 * Audit entries are queued in memory as responses finish and written in batches, off the request's
 * hot path. `close()` drains the queue, so a clean shutdown loses none. Entries carry no bodies,
 * headers or query strings, so no secret can reach the audit log.
 */
export class AuditWriter {
  private queue: AuditEntry[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly db: Knex,
    private readonly logger: Logger,
    private readonly intervalMs: number,
    private readonly batchSize = 500,
  ) {}

  record(entry: AuditEntry): void {
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

  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  private async writeQueued(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.batchSize);
      try {
        await preparedQuery(this.db, 'audit-insert-batch', INSERT_BATCH, COLUMNS.map((c) => batch.map((e) => e[c])));
      } catch (err) {
        // Put the batch back and retry on the next flush rather than dropping audit records.
        this.queue.unshift(...batch);
        this.logger.error({ err: (err as Error).message, pending: this.queue.length }, 'audit write failed; will retry');
        if (!this.closed && !this.timer) this.timer = setTimeout(() => void this.flush(), 1_000);
        return;
      }
    }
  }
}
