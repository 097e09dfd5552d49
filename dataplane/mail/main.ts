import { loadConfig } from '../../common/config';
import { createLogger } from '../../common/logger';
import { createDb } from '../../db/knex';
import { loadKeyring } from '../../infra/master-key';
import { HarakaServer } from '../../providers/haraka/haraka.server';
import { MTA_HOOKS_MODULE } from './mta-hooks';
import { MailDataPlane } from './server';

/**
 * The mail gateway's data plane as its own process (`npm run mail`; `npm start` runs it): makes sure
 * this host's MTA (Haraka, providers/haraka/) runs, started with what its hooks need, then serves
 * `POST /emails` on MAIL_PORT. The MTA is daemonised: it outlives this process (mail in its queue
 * keeps going out) and a later start re-uses it; `npm start` stops it on Ctrl-C.
 */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'mail');
  const db = createDb(config.DATABASE_URL);
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  const mta = await HarakaServer.start(mtaOptionsOf(config));
  const plane = new MailDataPlane({
    db,
    keyring,
    submission: { host: mta.host, port: mta.port },
    onError: (err) => logger.warn({ err: err.message }, 'mail data plane error'),
  });
  const url = await plane.listen(config.MAIL_PORT, config.HOST);
  logger.info({ url, smtp: `${mta.host}:${mta.port}` }, 'mail data plane listening');
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await plane.close();
    await db.destroy();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
}

/** How this host's MTA is started: its data, port, relay, and the environment its hooks read (never written to disk). */
export function mtaOptionsOf(config: ReturnType<typeof loadConfig>) {
  const env: Record<string, string> = { DATABASE_URL: config.DATABASE_URL, LOG_LEVEL: config.LOG_LEVEL };
  for (const name of ['CLOUD_MASTER_KEY', 'MAIL_BOUNCE_RATE_LIMIT', 'MAIL_COMPLAINT_RATE_LIMIT', 'MAIL_SUSPEND_MIN_SENDS', 'NODE_ENV'] as const) {
    const value = process.env[name];
    if (value) env[name] = value;
  }
  return {
    dataDir: config.MAIL_DATA_DIR,
    port: config.MAIL_SMTP_PORT,
    hooksModule: MTA_HOOKS_MODULE,
    env,
    smarthost: config.MAIL_SMARTHOST ?? null,
  };
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
