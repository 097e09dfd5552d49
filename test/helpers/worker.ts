import { createWorker, type AgentWorkers, type WorkerInput } from '../../workers/worker';
import type { BackgroundService } from '../../workers/background';

/**
 * A worker as `workers/main.ts` runs one, that a test starts and stops (again and again): its
 * Temporal workers and its loops (registration, keepers, sweepers), built anew at each start.
 */
export function restartableWorker(input: () => WorkerInput): { start(): Promise<void>; stop(): Promise<void> } {
  let worker: AgentWorkers | null = null;
  let background: BackgroundService[] = [];
  let running: Promise<void> | null = null;
  return {
    async start() {
      if (worker) return;
      const built = await createWorker(input());
      ({ worker, background } = built);
      for (const service of background) await service.start();
      running = built.worker.run();
    },
    async stop() {
      if (!worker) return;
      worker.shutdown();
      await running;
      for (const service of background) await service.stop();
      worker = null;
      background = [];
      running = null;
    },
  };
}
