import { loadConfig } from '../../common/config';
import { createDb } from '../../db/knex';
import { MailGatewayMtaHooks } from '../../domain/mailgateway/mta-hooks';
import { loadKeyring } from '../../infra/master-key';
import type { MtaHooks } from '../../providers/haraka/hooks';

/**
 * The module the MTA loads (`CLOUD_MAIL_HOOKS`, providers/haraka/hooks.ts): the mail gateway's rules
 * on PostgreSQL, configured from the MTA process's environment (DATABASE_URL, CLOUD_MASTER_KEY and
 * the MAIL_* thresholds, passed by whoever starts it: dataplane/mail/main.ts).
 */
export async function createMtaHooks(): Promise<MtaHooks> {
  const config = loadConfig();
  const db = createDb(config.DATABASE_URL);
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  return new MailGatewayMtaHooks(db, keyring, {
    bounce_rate_limit: config.MAIL_BOUNCE_RATE_LIMIT,
    complaint_rate_limit: config.MAIL_COMPLAINT_RATE_LIMIT,
    min_sends: config.MAIL_SUSPEND_MIN_SENDS,
  });
}

/** Where this module is, for HarakaServer's `hooksModule`. */
export const MTA_HOOKS_MODULE = __filename;
