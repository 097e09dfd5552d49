import type { Knex } from 'knex';

/**
 * Delivery metrics of a gateway (SPEC "Mail gateway": `GET /v1/mail-gateway/metrics`) and the
 * suspension thresholds. Counts are of messages: `sent` those accepted in the window, `delivered`,
 * `opened`, `bounced`, `complained` those of them with such an event (a message delivered to one
 * recipient and bounced by another counts in both). Rates are over `sent`, null when nothing was sent.
 * Latency is from acceptance to a message's first `delivered` event.
 */
export interface Counts {
  sent: number;
  delivered: number;
  opened: number;
  bounced: number;
  complained: number;
}

export interface Thresholds {
  bounce_rate_limit: number;
  complaint_rate_limit: number;
  /** Below this many sends in the last 30 days, no rate suspends sending. */
  min_sends: number;
}

const KINDS = ['delivered', 'opened', 'bounced', 'complained'] as const;

const rate = (n: number, of: number): number | null => (of === 0 ? null : n / of);

function countsSelect(db: Knex) {
  return [
    db.raw('count(*)::int as sent'),
    ...KINDS.map((k) => db.raw(`count(*) filter (where exists (select 1 from mail_events e where e.message_id = m.id and e.kind = ?))::int as ${k}`, [k])),
  ];
}

/** The window: the last `days` UTC days, today included. */
function since(days: number, now = new Date()): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - (days - 1)));
}

export async function gatewayMetrics(db: Knex, serviceId: number, days: number, thresholds: Thresholds, now = new Date()) {
  const from = since(days, now);
  const base = () => db('mail_messages as m').where('m.service_id', serviceId).where('m.created_at', '>=', from);
  const [total] = (await base().select(countsSelect(db))) as Counts[];
  const daily = (await base()
    .select(db.raw(`to_char(m.created_at at time zone 'UTC', 'YYYY-MM-DD') as date`), ...countsSelect(db))
    .groupByRaw('1')) as Array<Counts & { date: string }>;
  const domains = (await base()
    .select('m.domain', ...countsSelect(db))
    .groupBy('m.domain')
    .orderBy('m.domain')) as Array<Counts & { domain: string }>;
  const [latency] = (
    await db.raw(
      `select percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.95) within group (order by ms) as p95
         from (select extract(epoch from (min(e.at) - m.created_at)) * 1000 as ms
                 from mail_messages m join mail_events e on e.message_id = m.id and e.kind = 'delivered'
                where m.service_id = ? and m.created_at >= ?
                group by m.id, m.created_at) d`,
      [serviceId, from],
    )
  ).rows as Array<{ p50: number | null; p95: number | null }>;
  const byDate = new Map(daily.map((d) => [d.date, d]));
  const series = Array.from({ length: days }, (_, i) => {
    const date = new Date(from.getTime() + i * 86_400_000).toISOString().slice(0, 10);
    const d = byDate.get(date);
    return { date, sent: d?.sent ?? 0, delivered: d?.delivered ?? 0, opened: d?.opened ?? 0, bounced: d?.bounced ?? 0, complained: d?.complained ?? 0 };
  });
  return {
    object: 'mail_metrics' as const,
    days,
    ...pick(total),
    delivery_rate: rate(total.delivered, total.sent),
    open_rate: rate(total.opened, total.sent),
    bounce_rate: rate(total.bounced, total.sent),
    complaint_rate: rate(total.complained, total.sent),
    latency_ms: {
      p50: latency?.p50 === null || latency?.p50 === undefined ? null : Math.round(Number(latency.p50)),
      p95: latency?.p95 === null || latency?.p95 === undefined ? null : Math.round(Number(latency.p95)),
    },
    bounce_rate_limit: thresholds.bounce_rate_limit,
    complaint_rate_limit: thresholds.complaint_rate_limit,
    daily: series,
    domains: domains.map((d) => ({ domain: d.domain, ...pick(d) })),
  };
}

const pick = (c: Counts): Counts => ({ sent: c.sent, delivered: c.delivered, opened: c.opened, bounced: c.bounced, complained: c.complained });

/**
 * Suspends sending when the last 30 days' bounce or complaint rate is over its limit (with at least
 * `min_sends` sends, so that a handful of bounces on a new gateway does not). Called after each
 * bounce or complaint is recorded. Sending stays suspended until an operator lifts it.
 */
export async function enforceThresholds(db: Knex, serviceId: number, thresholds: Thresholds, now = new Date()): Promise<boolean> {
  const [c] = (await db('mail_messages as m')
    .where('m.service_id', serviceId)
    .where('m.created_at', '>=', since(30, now))
    .select(countsSelect(db))) as Counts[];
  if (c.sent < thresholds.min_sends) return false;
  const bounce = c.bounced / c.sent;
  const complaint = c.complained / c.sent;
  let reason: string | null = null;
  if (bounce > thresholds.bounce_rate_limit)
    reason = `the bounce rate of the last 30 days (${(bounce * 100).toFixed(1)} % of ${c.sent} sends) is over the limit of ${(thresholds.bounce_rate_limit * 100).toFixed(1)} %`;
  else if (complaint > thresholds.complaint_rate_limit)
    reason = `the complaint rate of the last 30 days (${(complaint * 100).toFixed(2)} % of ${c.sent} sends) is over the limit of ${(thresholds.complaint_rate_limit * 100).toFixed(2)} %`;
  if (!reason) return false;
  const updated = await db('mail_gateways')
    .where({ service_id: serviceId })
    .whereNull('sending_suspended_at')
    .update({ sending_suspended_at: now, sending_suspended_reason: reason });
  return updated > 0;
}
