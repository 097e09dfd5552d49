import type { Knex } from 'knex';
import { newUlidId } from '../common/ids';

/**
 * The event outbox. An event is inserted in the same transaction as the state change that causes
 * it, so a crash can lose neither; the webhook dispatcher reads undispatched rows and fans them out.
 * A NOTIFY (delivered at commit) wakes the dispatcher without polling delays.
 */
export type EventType = 'operation.completed' | 'service.active' | 'service.suspended' | 'service.terminated' | 'webhook.ping';

export const EVENT_TYPES: readonly EventType[] = ['operation.completed', 'service.active', 'service.suspended', 'service.terminated', 'webhook.ping'];

export const EVENTS_CHANNEL = 'cloud_events';

export interface EventEnvelope {
  id: string;
  object: 'event';
  type: string;
  created_at: string;
  data: unknown;
}

export async function emitEvent(
  trx: Knex | Knex.Transaction,
  /** `serviceId`: the service the event concerns, if any; credentials that cannot see it do not read the event's body. */
  event: { accountId: number; type: EventType; data: unknown; serviceId?: number | null },
): Promise<EventEnvelope> {
  const id = newUlidId('evt');
  const [row] = await trx('events')
    .insert({ id, account_id: event.accountId, type: event.type, data: JSON.stringify(event.data), service_id: event.serviceId ?? null })
    .returning(['created_at']);
  await trx.raw('select pg_notify(?, ?)', [EVENTS_CHANNEL, id]);
  return { id, object: 'event', type: event.type, created_at: new Date(row.created_at).toISOString(), data: event.data };
}
