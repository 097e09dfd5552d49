/**
 * The raw Temporal client's start rate, for bench/api.bench.ts to set beside the API's async POSTs:
 * a process of its own (as the API is) with a plain `@temporalio/client` connection, starting the
 * same workflow (`vpsPowerWorkflow`) with the same options the API's OperationService gives it
 * (task queue, search attributes, memo), `concurrency` starts in flight, for `seconds`. Answers
 * `run` with `ran`: the starts answered (all, and those answered within `seconds`), errors and
 * latency percentiles.
 */
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../common/config';
import { newUlidId } from '../common/ids';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';

type Message =
  | { type: 'run'; seconds: number; concurrency: number; input: Record<string, unknown>; accountId: string; resourceId: string; resourceIds?: string[] }
  | { type: 'stop' };

async function main() {
  if (!process.send) throw new Error('bench/raw-start-child.ts is started by bench/api.bench.ts (it needs an IPC channel)');
  const config = loadConfig();
  const connection = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
  const temporal = new TemporalGateway(temporalOptionsOf(config), new Client({ connection, namespace: config.TEMPORAL_NAMESPACE }));
  // Experiment `raw-like-api`: the starts as the API sends them (a gRPC deadline on each, the
  // resource id of each of the VPSes in turn), to tell a difference in the requests from one in load.
  const likeApi = (process.env.BENCH_EXPERIMENTS ?? '').split(',').includes('raw-like-api');
  let turn = 0;
  process.send({ type: 'ready', port: 0, pid: process.pid });
  process.on('message', (msg: Message) => {
    if (msg.type === 'stop') {
      if (likeApi) {
        const { user, system } = process.cpuUsage();
        console.error(`timing raw client CPU: user ${(user / 1e6).toFixed(1)} s, system ${(system / 1e6).toFixed(1)} s`);
      }
      void connection.close().finally(() => process.exit(0));
      return;
    }
    void (async () => {
      const latencies: number[] = [];
      let errors = 0;
      // Starts answered within the `seconds` (the rate, as autocannon counts answers), and all of them.
      let inWindow = 0;
      const until = performance.now() + msg.seconds * 1000;
      const lane = async () => {
        while (performance.now() < until) {
          const id = newUlidId('op');
          const started = performance.now();
          try {
            const resourceId = likeApi && msg.resourceIds ? msg.resourceIds[turn++ % msg.resourceIds.length] : msg.resourceId;
            const start = () =>
              temporal.client.workflow.start('vpsPowerWorkflow', {
                workflowId: id,
                taskQueue: temporal.taskQueue,
                args: [{ operationId: id, ...msg.input }],
                typedSearchAttributes: temporal.searchAttributes({ operationType: 'vps.power', accountId: msg.accountId, resourceId }),
                memo: { operation_type: 'vps.power', account: msg.accountId, resource: `vps ${resourceId}`, credential: 'raw' },
              });
            await (likeApi ? temporal.withDeadline(10_000, start) : start());
            const now = performance.now();
            latencies.push(now - started);
            if (now <= until) inWindow++;
          } catch {
            errors++;
          }
        }
      };
      await Promise.all(Array.from({ length: msg.concurrency }, lane));
      latencies.sort((a, b) => a - b);
      const at = (p: number) => Math.round(latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0);
      process.send!({ type: 'ran', starts: latencies.length, inWindow, errors, p50: at(50), p99: at(99) });
    })();
  });
  process.on('disconnect', () => process.exit(0));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
