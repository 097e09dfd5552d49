import type { Knex } from 'knex';
import { addUsage, utcDay, type Counts } from '../../domain/serverless/store';
import { PEAK_METRICS, type Metric, type ServerlessPlan } from '../../domain/serverless/plans';
import { atHardCap, type Totals } from '../../domain/serverless/manage';

/**
 * The data planes' usage counts: added in memory per tenant and UTC day, written to
 * serverless_usage_days every `flushMs` (DECISIONS: counts show within 5 s), summed there with the
 * other processes' counts. Peaks (`storage_bytes_peak`) keep the day's largest value.
 *
 * The hard-cap check reads the month's totals from PostgreSQL at most once a flush interval per
 * tenant, plus what this process has not written yet.
 */
const DAY_MS = 86_400_000;

export class UsageMeter {
  private pending = new Map<string, { serviceId: number; day: string; counts: Counts }>();
  private readonly months = new Map<number, { at: number; totals: Totals }>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  /** The entry of `pending` the last add went to (the next one is most often for the same tenant and day). */
  private last: { serviceId: number; day: string; counts: Counts } | null = null;
  private day = '';
  private dayEndsAt = 0;

  constructor(
    private readonly db: Knex,
    private readonly flushMs = 1_000,
    private readonly onError: (err: Error) => void = () => undefined,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.flush().catch((err) => this.onError(err)), this.flushMs);
    this.timer.unref();
  }

  add(serviceId: number, counts: Counts, day = this.today()): void {
    let entry = this.last;
    if (entry === null || entry.serviceId !== serviceId || entry.day !== day) {
      const key = `${serviceId}\n${day}`;
      entry = this.pending.get(key) ?? null;
      if (!entry) this.pending.set(key, (entry = { serviceId, day, counts: {} }));
      this.last = entry;
    }
    for (const metric in counts) {
      const n = counts[metric as Metric]!;
      const had = entry.counts[metric as Metric];
      entry.counts[metric as Metric] = PEAK_METRICS.has(metric as Metric) ? Math.max(had ?? 0, n) : (had ?? 0) + n;
    }
  }

  /** The UTC day now (utcDay()), remembered until it ends: UTC days are 86,400,000 ms in JavaScript's clock. */
  private today(): string {
    const now = Date.now();
    if (now >= this.dayEndsAt || now < this.dayEndsAt - DAY_MS) {
      this.day = utcDay(new Date(now));
      this.dayEndsAt = (Math.floor(now / DAY_MS) + 1) * DAY_MS;
    }
    return this.day;
  }

  /** Writes what is counted; concurrent calls share one write. Counts a failed write keeps for the next. */
  async flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    const batch = this.pending;
    if (batch.size === 0) return;
    this.pending = new Map();
    this.last = null;
    const tenants = new Set([...batch.values()].map((e) => e.serviceId));
    const run: Promise<void> = (async () => {
      try {
        for (const [key, entry] of batch) {
          // Whole units are written; a fraction (execution time) waits for the next flush.
          const whole: Counts = {};
          const fractions: Counts = {};
          for (const [metric, n] of Object.entries(entry.counts) as Array<[Metric, number]>) {
            whole[metric] = Math.floor(n);
            if (!PEAK_METRICS.has(metric) && n > whole[metric]!) fractions[metric] = n - whole[metric]!;
          }
          if (Object.values(whole).every((n) => n === 0)) continue; // only a fraction: kept (re-added below)
          try {
            await addUsage(this.db, entry.serviceId, entry.day, whole);
            batch.delete(key);
            if (Object.keys(fractions).length > 0) this.add(entry.serviceId, fractions, entry.day);
          } catch (err) {
            this.onError(err as Error);
          }
        }
      } finally {
        for (const entry of batch.values()) this.add(entry.serviceId, entry.counts, entry.day);
        // What was written is in PostgreSQL now, no longer pending: read the month again.
        for (const id of tenants) this.months.delete(id);
      }
    })().finally(() => {
      // Cleared after the assignment below, even when the batch needed no write (no await: the
      // body above may have finished before `run` was assigned).
      if (this.flushing === run) this.flushing = null;
    });
    this.flushing = run;
    return run;
  }

  /** The month's totals so far: PostgreSQL's (read at most once per flush interval) and this process's unwritten counts. */
  async monthTotals(serviceId: number): Promise<Totals> {
    let kept = this.months.get(serviceId);
    if (!kept || Date.now() - kept.at >= this.flushMs) {
      const month = utcDay().slice(0, 7);
      const [row] = await this.db('serverless_usage_days')
        .where({ service_id: serviceId })
        .where('day', '>=', `${month}-01`)
        .select(
          this.db.raw('coalesce(sum(reads), 0) as reads'),
          this.db.raw('coalesce(sum(writes), 0) as writes'),
          this.db.raw('coalesce(sum(rows_read), 0) as rows_read'),
          this.db.raw('coalesce(sum(rows_written), 0) as rows_written'),
          this.db.raw('coalesce(sum(invocations), 0) as invocations'),
          this.db.raw('coalesce(sum(execution_ms), 0) as execution_ms'),
          this.db.raw('coalesce(max(storage_bytes_peak), 0) as storage_bytes_peak'),
        );
      const totals: Totals = {};
      for (const [k, v] of Object.entries(row as Record<string, unknown>)) totals[k as Metric] = Number(v);
      kept = { at: Date.now(), totals };
      this.months.set(serviceId, kept);
    }
    const totals: Totals = { ...kept.totals };
    for (const entry of this.pending.values()) {
      if (entry.serviceId !== serviceId) continue;
      for (const [metric, n] of Object.entries(entry.counts) as Array<[Metric, number]>) {
        totals[metric] = PEAK_METRICS.has(metric) ? Math.max(totals[metric] ?? 0, n) : (totals[metric] ?? 0) + n;
      }
    }
    return totals;
  }

  /** Whether a hard-capped plan's month is used up (the primitive then refuses writes or invocations). */
  async atCap(serviceId: number, plan: ServerlessPlan): Promise<boolean> {
    if (!plan.hard_cap) return false;
    return atHardCap(plan, await this.monthTotals(serviceId));
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }
}
