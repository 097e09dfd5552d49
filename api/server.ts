import type { Server } from 'node:http';
import { loadConfig } from '../common/config';
import { createApi } from './bootstrap';

/** The API process: `tsx api/server.ts`. SIGINT/SIGTERM stop accepting, finish requests, drain the audit log. */
async function main() {
  const config = loadConfig();
  const api = await createApi(config);
  const server: Server = api.app.listen(config.PORT, config.HOST, () => {
    api.deps.logger.info({ url: `http://${config.HOST}:${config.PORT}` }, 'API listening');
  });
  server.keepAliveTimeout = 65_000;

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    api.deps.logger.info({ signal }, 'API stopping');
    server.close();
    server.closeIdleConnections();
    setTimeout(() => server.closeAllConnections(), 5_000).unref();
    await new Promise((resolve) => server.once('close', resolve));
    await api.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
