/**
 * The API under measurement, in a process of its own (started by bench/api.bench.ts, never alone):
 * the real `createApi` from the environment, listening on an ephemeral loopback port. It tells the
 * parent its port over IPC and answers: `flush` (drain the audit queue into PostgreSQL),
 * `profile-start` / `profile-stop` (a V8 CPU profile of the measured window only, written to the
 * given file) and `stop` (close like api/server.ts: stop accepting, drain the audit log, exit).
 * With BENCH_PROCESSES=N it runs as N processes on one port, as API_PROCESSES does (child-cluster.ts).
 */
import { writeFileSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../common/config';
import { Keyring } from '../common/crypto';
import { createApi } from '../api/bootstrap';
import { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { servesHere } from './child-cluster';

type Message = { type: 'flush'; id: number } | { type: 'stop' } | { type: 'profile-start' } | { type: 'profile-stop'; file: string };

async function main() {
  if (!process.send) throw new Error('bench/api-child.ts is started by bench/api.bench.ts (it needs an IPC channel)');
  // BENCH_PROCESSES > 1: this primary only relays; the API runs in its cluster workers.
  if (!servesHere()) return;
  const config = loadConfig();
  const experiments = new Set((process.env.BENCH_EXPERIMENTS ?? '').split(',').filter(Boolean));
  if (experiments.has('memo-derive')) {
    // Experiment: Keyring.derive memoised per instance and purpose (HKDF once, not per cursor).
    const derive = Keyring.prototype.derive;
    const memo = new WeakMap<Keyring, Map<string, Buffer>>();
    Keyring.prototype.derive = function (this: Keyring, purpose: string) {
      let keys = memo.get(this);
      if (!keys) memo.set(this, (keys = new Map()));
      let key = keys.get(purpose);
      if (!key) keys.set(purpose, (key = derive.call(this, purpose)));
      return key;
    };
  }
  const api = await createApi(config);
  if (experiments.has('no-als')) {
    // Experiment: deadlines on Temporal calls by a timer race instead of the client's
    // AsyncLocalStorage (whose first use turns on promise hooks for the whole process).
    api.deps.temporal.withDeadline = <T>(ms: number, fn: () => Promise<T>) =>
      new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('deadline exceeded')), ms);
        fn()
          .then(resolve, reject)
          .finally(() => clearTimeout(timer));
      });
  }
  if (experiments.has('native-client')) {
    // Experiment: the API's Temporal client on the SDK's native (Rust) connection instead of grpc-js.
    const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
    const gateway = api.deps.temporal as unknown as { clientInstance: Client; connection: unknown };
    gateway.connection = connection;
    gateway.clientInstance = new Client({ connection, namespace: config.TEMPORAL_NAMESPACE });
  }
  if (experiments.has('no-start')) {
    // Experiment: the async POST without its workflow start, to weigh what the API and PostgreSQL
    // add to a start on their own (the answer is still a 202 with the operation).
    (api.deps.temporal.client.workflow as { start: unknown }).start = async () => ({});
  }
  if (experiments.has('slow-start')) {
    // Experiment: a workflow start that takes 300 ms and no CPU, to weigh the API at the POST's rate
    // without the Temporal server's load on the machine.
    (api.deps.temporal.client.workflow as { start: unknown }).start = () => new Promise((r) => setTimeout(() => r({}), 300));
  }
  if (experiments.has('row-cache')) {
    // Experiment: the operation row held in the process (no invalidation: an upper bound only).
    const reads = api.deps.operations.reads;
    const findVisible = reads.findVisible.bind(reads);
    const held = new Map<string, Awaited<ReturnType<typeof findVisible>>>();
    reads.findVisible = async (principal, id) => {
      const row = held.get(id) ?? (await findVisible(principal, id));
      held.set(id, row);
      return row;
    };
  }
  const timings: Record<string, number[]> = {};
  const gcMs: Record<string, number> = {};
  if (experiments.has('timing')) {
    // Experiment: where a POST's time goes under load. The wall time of the whole start and of the
    // workflow start alone (printed on stop), and the garbage collector's time, the heap and the
    // CPU so far (printed at each flush, that is after each measured window).
    const kinds: Record<number, string> = { 1: 'minor', 2: 'major', 4: 'incremental', 8: 'weak callbacks' };
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        const kind = kinds[(entry as unknown as { detail: { kind: number } }).detail.kind] ?? 'other';
        gcMs[`${kind} ms`] = (gcMs[`${kind} ms`] ?? 0) + entry.duration;
        gcMs[`${kind} count`] = (gcMs[`${kind} count`] ?? 0) + 1;
      }
    }).observe({ entryTypes: ['gc'] });
    const time =
      <A extends unknown[], R>(name: string, fn: (...a: A) => Promise<R>) =>
      async (...a: A): Promise<R> => {
        const t = performance.now();
        try {
          return await fn(...a);
        } finally {
          (timings[name] ??= []).push(performance.now() - t);
        }
      };
    const wf = api.deps.temporal.client.workflow as unknown as { start: (...a: unknown[]) => Promise<unknown> };
    wf.start = time('workflow start', wf.start.bind(wf));
    api.deps.operations.start = time('OperationService.start', api.deps.operations.start.bind(api.deps.operations));
  }
  const server = api.app.listen(0, '127.0.0.1', () => {
    process.send!({ type: 'ready', port: (server.address() as AddressInfo).port, pid: process.pid });
  });
  server.keepAliveTimeout = 65_000;

  const profiler = new Session();
  profiler.connect();
  process.on('message', (msg: Message) => {
    if (msg.type === 'profile-start') {
      void profiler
        .post('Profiler.enable')
        .then(() => profiler.post('Profiler.start'))
        .then(() => process.send!({ type: 'profile-started' }));
    } else if (msg.type === 'profile-stop') {
      void profiler.post('Profiler.stop').then(({ profile }) => {
        writeFileSync(msg.file, JSON.stringify(profile));
        process.send!({ type: 'profile-stopped' });
      });
    } else if (msg.type === 'flush') {
      if (experiments.has('timing')) {
        const m = process.memoryUsage();
        const { user, system } = process.cpuUsage();
        console.error(`timing gc so far: ${JSON.stringify(Object.fromEntries(Object.entries(gcMs).map(([k, v]) => [k, Math.round(v)])))}`);
        console.error(
          `timing memory: heap used ${(m.heapUsed / 1e6).toFixed(0)} MB of ${(m.heapTotal / 1e6).toFixed(0)}, rss ${(m.rss / 1e6).toFixed(0)} MB; CPU so far user ${(user / 1e6).toFixed(1)} s, system ${(system / 1e6).toFixed(1)} s`,
        );
      }
      void api.deps.audit.flush().then(() => process.send!({ type: 'flushed', id: msg.id }));
    } else if (msg.type === 'stop') {
      if (experiments.has('timing')) {
        const { user, system } = process.cpuUsage();
        console.error(`timing API process CPU: user ${(user / 1e6).toFixed(1)} s, system ${(system / 1e6).toFixed(1)} s`);
      }
      for (const [name, xs] of Object.entries(timings)) {
        xs.sort((a, b) => a - b);
        const at = (q: number) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))]?.toFixed(1);
        console.error(`timing ${name}: n ${xs.length}, p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, p99 ${at(0.99)} ms`);
      }
      server.close();
      server.closeAllConnections();
      // process.exit() (not a natural exit) so that --cpu-prof still writes its profile: Node writes
      // it on exit either way, and the Temporal client's lazy connection would otherwise keep us up.
      void api.close().then(() => process.exit(0));
    }
  });
  process.on('disconnect', () => process.exit(0));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
