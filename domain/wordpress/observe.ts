import type { Knex } from 'knex';
import { RECOVERY_HALT_AFTER } from './keeper';

/**
 * What a hosted site's monitoring and mail endpoints read besides the backend.
 * - Recovery: `wordpress_recovery`, written by the keeper (domain/wordpress/keeper.ts). `halted` is
 *   the keeper's own rule: the last RECOVERY_HALT_AFTER (3) events all failed, so it has stopped
 *   repairing the site until the site answers again (an `ok` event then ends it).
 * - Mail: sites send with wp_mail over SMTP through the host's relay (WORDPRESS_SMTP_RELAY); the
 *   sender is WordPress's default, `wordpress@<primary host without www.>`.
 */
export const RECOVERY_EVENTS_SHOWN = 50;
export const MAIL_LOG_DAYS = 7;

export interface RecoveryEvent {
  action: string;
  reason: string;
  ok: boolean;
  at: Date;
}

/** The newest RECOVERY_EVENTS_SHOWN events, newest first, and whether the keeper gave up. */
export async function recoveryOf(db: Knex, serviceId: number): Promise<{ halted: boolean; events: RecoveryEvent[] }> {
  const rows: Array<{ action: string; reason: string; ok: boolean; created_at: Date }> = await db('wordpress_recovery')
    .where({ service_id: serviceId })
    .orderBy('id', 'desc')
    .limit(RECOVERY_EVENTS_SHOWN);
  const last = rows.slice(0, RECOVERY_HALT_AFTER);
  return {
    halted: last.length === RECOVERY_HALT_AFTER && last.every((e) => !e.ok),
    events: rows.map((r) => ({ action: r.action, reason: r.reason, ok: r.ok, at: r.created_at })),
  };
}

/** WordPress's default sender for a site whose home is `http://<primaryHost>` (wp_mail). */
export function mailFromOf(primaryHost: string): string {
  return `wordpress@${primaryHost.replace(/^www\./, '')}`;
}
