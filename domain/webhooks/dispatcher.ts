import pg from 'pg';
import type { Config } from '../../common/config';
import { newUlidId, parseNumericId } from '../../common/ids';
import type { Logger } from '../../common/logger';
import type { Db } from '../../db/knex';
import { EVENTS_CHANNEL } from '../events';
import type { TemporalGateway } from '../../infra/temporal';
import { deliverToEndpoint, eventBody } from './webhooks';

interface EventRow {
  id: string;
  account_id: number;
  type: string;
  data: unknown;
  created_at: Date;
}

interface HookRow {
  id: number;
  account_id: number;
  events: string[];
  enabled: boolean;
  created_at: Date;
}

export type HandOff = (endpoint: { webhookId: number; accountId: number }, deliveries: Array<{ id: string }>) => Promise<void>;

export interface DispatcherOptions {
  batchSize?: number;
  /** Hand-offs (signal-with-starts) in flight at once. */
  startConcurrency?: number;
  /**
   * Where a webhook's queued deliveries go: its endpoint workflow. Replaced only by the benchmark's
   * design comparison (bench/webhooks.bench.ts --design=dispatcher-first).
   */
  handOff?: HandOff;
}

async function forEachLimit<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await fn(items[next++]);
  });
  await Promise.all(lanes);
}

/**
 * The event dispatcher (a background service of the worker process). It reads the outbox: woken by
 * LISTEN cloud_events (NOTIFY at the commit of every event), and by a periodic sweep so that nothing
 * is lost when a notification is missed or a process died half-way. For each undispatched event:
 *
 * 1. one delivery row per enabled webhook of the account subscribed to the type or to `*` (a
 *    `webhook.ping` goes to the webhook named in its data only, whatever it subscribes to), inserted
 *    with ON CONFLICT (event_id, webhook_id) DO NOTHING;
 * 2. the queued deliveries of the batch, per webhook, handed to that endpoint's workflow in one
 *    signal-with-start (`webhook-whk_<n>`; a delivery it already holds is not taken twice);
 * 3. only then the events are marked dispatched.
 *
 * A crash between any two steps is repaired by the next sweep without duplicates; two dispatchers
 * racing on one event produce the same rows, and the endpoint workflow takes each delivery once.
 */
export class EventDispatcher {
  readonly name = 'webhook-dispatcher';
  private listener: pg.Client | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = true;
  private readonly batchSize: number;
  private readonly startConcurrency: number;
  private readonly handOff: HandOff;

  constructor(
    private readonly deps: { db: Db; config: Config; logger: Logger; temporal: TemporalGateway },
    options: DispatcherOptions = {},
  ) {
    this.batchSize = options.batchSize ?? 200;
    this.startConcurrency = options.startConcurrency ?? 32;
    this.handOff = options.handOff ?? ((endpoint, deliveries) => deliverToEndpoint(deps.temporal, deps.config, endpoint, deliveries));
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.listen();
    this.sweepTimer = setInterval(() => this.kick(), this.deps.config.WEBHOOK_SWEEP_INTERVAL);
    this.sweepTimer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => undefined);
    await this.running;
  }

  /** Runs a dispatch pass now, or right after the one in progress. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.drain().finally(() => {
      this.running = null;
      if (this.again && !this.stopped) {
        this.again = false;
        this.kick();
      }
    });
  }

  private async listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.deps.config.DATABASE_URL });
    const lost = (err?: Error) => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => undefined);
      if (this.stopped) return;
      this.deps.logger.warn({ err: err?.message }, 'event listener lost; the sweep covers the gap, reconnecting');
      this.reconnectTimer = setTimeout(() => {
        this.reconnectTimer = null;
        if (!this.stopped) void this.listen().then(() => this.kick());
      }, 1_000);
      this.reconnectTimer.unref();
    };
    try {
      await client.connect();
      client.on('notification', () => this.kick());
      client.on('error', lost);
      client.on('end', () => lost());
      await client.query(`listen ${EVENTS_CHANNEL}`);
      this.listener = client;
    } catch (err) {
      this.listener = client;
      lost(err as Error);
    }
  }

  private async drain(): Promise<void> {
    try {
      while (!this.stopped) {
        const { read, complete } = await this.dispatchBatch();
        if (read < this.batchSize || !complete) break;
      }
    } catch (err) {
      this.deps.logger.error({ err }, 'event dispatch failed; the next sweep retries');
    }
  }

  /** One batch of undispatched events, oldest first. Exposed for tests and the benchmark. */
  async dispatchBatch(): Promise<{ read: number; deliveries: number; complete: boolean }> {
    const { db, logger } = this.deps;
    const events: EventRow[] = await db('events')
      .whereNull('dispatched_at')
      .orderBy([{ column: 'created_at' }, { column: 'id' }])
      .limit(this.batchSize)
      .select('id', 'account_id', 'type', 'data', 'created_at');
    if (events.length === 0) return { read: 0, deliveries: 0, complete: true };

    const accountIds = [...new Set(events.map((e) => e.account_id))];
    const hooks: HookRow[] = await db('webhooks').whereIn('account_id', accountIds).select('id', 'account_id', 'events', 'enabled', 'created_at');
    const rows: Array<Record<string, unknown>> = [];
    for (const event of events) {
      const targets =
        event.type === 'webhook.ping'
          ? hooks.filter(
              (h) => h.account_id === event.account_id && h.id === parseNumericId('whk', String((event.data as { webhook?: unknown })?.webhook ?? '')),
            )
          : hooks.filter(
              (h) =>
                h.account_id === event.account_id &&
                h.enabled &&
                // A webhook receives the events that happen after it was registered.
                h.created_at.getTime() <= new Date(event.created_at).getTime() &&
                (h.events.includes('*') || h.events.includes(event.type)),
            );
      if (targets.length === 0) continue;
      const body = eventBody(event);
      for (const hook of targets) {
        rows.push({ id: newUlidId('dlv'), webhook_id: hook.id, account_id: event.account_id, event_id: event.id, event_type: event.type, body });
      }
    }
    for (let i = 0; i < rows.length; i += 500) {
      await db('webhook_deliveries')
        .insert(rows.slice(i, i + 500))
        .onConflict(['event_id', 'webhook_id'])
        .ignore();
    }

    const eventIds = events.map((e) => e.id);
    const queued: Array<{ id: string; account_id: number; webhook_id: number; event_id: string }> = await db('webhook_deliveries')
      .whereIn('event_id', eventIds)
      .where('status', 'queued')
      .select('id', 'account_id', 'webhook_id', 'event_id');
    const byWebhook = new Map<number, typeof queued>();
    for (const d of queued) {
      const list = byWebhook.get(d.webhook_id);
      if (list) list.push(d);
      else byWebhook.set(d.webhook_id, [d]);
    }
    const unstarted = new Set<string>();
    let firstError: unknown = null;
    await forEachLimit([...byWebhook.values()], this.startConcurrency, async (deliveries) => {
      try {
        await this.handOff(
          { webhookId: deliveries[0].webhook_id, accountId: deliveries[0].account_id },
          deliveries.map((d) => ({ id: d.id })),
        );
      } catch (err) {
        firstError ??= err;
        for (const d of deliveries) unstarted.add(d.event_id);
      }
    });
    const done = eventIds.filter((id) => !unstarted.has(id));
    if (done.length) await db('events').whereIn('id', done).whereNull('dispatched_at').update({ dispatched_at: db.fn.now() });
    if (unstarted.size) {
      logger.warn(
        { err: (firstError as Error)?.message, events: unstarted.size },
        'could not hand some deliveries to their endpoint workflow; left for the next sweep',
      );
    }
    return { read: events.length, deliveries: queued.length, complete: unstarted.size === 0 };
  }
}
