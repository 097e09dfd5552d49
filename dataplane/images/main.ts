import { loadConfig } from '../../common/config';
import { createLogger } from '../../common/logger';
import { loadKeyring } from '../../infra/master-key';
import { createDb } from '../../db/knex';
import { localServicePorts, protectLocalPorts } from '../../infra/webhook-targets';
import { IMAGES_NODE_FLAGS } from './node-flags';
import { ImageDeliveryServer } from './server';

/**
 * The image delivery plane as its own process (`npm run images`; `npm start` runs it): on
 * IMAGES_PORT, beside and apart from the API, so that transformations never slow the control plane.
 */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'images');
  const missing = IMAGES_NODE_FLAGS.filter((flag) => !process.execArgv.includes(flag));
  if (missing.length > 0) logger.warn({ missing }, "started without the delivery plane's Node flags (dataplane/images/node-flags.ts): misses cost more CPU");
  const db = createDb(config.DATABASE_URL);
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  // Sources on loopback (ALLOW_INSECURE_TARGETS) never reach the platform's own ports.
  protectLocalPorts(localServicePorts(config));
  const server = ImageDeliveryServer.fromConfig(config, db, keyring);
  const url = await server.listen(config.IMAGES_PORT, config.HOST);
  logger.info({ url }, 'image delivery plane listening');
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await server.close();
    await db.destroy();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
