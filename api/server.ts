import type { Server } from 'node:http';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { isSupervisor, superviseProcesses } from '../common/processes';
import { createApi } from './bootstrap';

/**
 * The API: `tsx api/server.ts`, API_PROCESSES processes on one port (node:cluster). Each process
 * stops on SIGINT/SIGTERM: stop accepting, finish requests, drain the audit log.
 */
async function main() {
  const config = loadConfig();
  if (isSupervisor(config.API_PROCESSES)) {
    superviseProcesses(config.API_PROCESSES, 'API', createLogger(config.LOG_LEVEL, 'api'));
    return;
  }
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
