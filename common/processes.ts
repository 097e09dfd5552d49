import cluster from 'node:cluster';
import type { Logger } from './logger';

/**
 * Several processes of one program on one machine (API_PROCESSES, WORKER_PROCESSES): the primary
 * forks them with node:cluster (API processes then share the listening port, the kernel spreading
 * connections), starts a new one when one dies, and on SIGINT/SIGTERM passes SIGTERM on and exits
 * once all have stopped. Each process gets CLOUD_PROCESS_INDEX (0 .. count-1), kept across restarts.
 */
export function superviseProcesses(count: number, name: string, logger: Logger): void {
  let stopping = false;
  const byWorker = new Map<number, number>(); // cluster worker id -> process index
  const fork = (index: number) => {
    const worker = cluster.fork({ CLOUD_PROCESS_INDEX: String(index) });
    byWorker.set(worker.id, index);
  };
  for (let i = 0; i < count; i++) fork(i);
  cluster.on('exit', (worker, code, signal) => {
    const index = byWorker.get(worker.id) ?? 0;
    byWorker.delete(worker.id);
    if (stopping) {
      if (byWorker.size === 0) process.exit(0);
      return;
    }
    logger.error({ index, code, signal }, `${name} process exited; starting another`);
    setTimeout(() => fork(index), 1_000);
  });
  const stop = () => {
    if (stopping) return;
    stopping = true;
    logger.info({ processes: byWorker.size }, `${name} stopping`);
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
    if (byWorker.size === 0) process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  logger.info({ processes: count }, `${name}: ${count} processes`);
}

/** This process's index among its program's processes (0 when there is one). */
export const processIndex = (): number => Number(process.env.CLOUD_PROCESS_INDEX ?? 0);

export const isSupervisor = (count: number): boolean => cluster.isPrimary && count > 1;
