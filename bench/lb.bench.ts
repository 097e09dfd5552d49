/**
 * Load balancers on real HAProxy (providers/haproxy/): requests per second through a balancer
 * against straight to a backend, and how long a configuration change takes (rules, bind probe,
 * `haproxy -c`, reload through the master socket, new worker answering), also under load.
 *
 *   npx tsx bench/lb.bench.ts [seconds per run, default 10] [connections, default 32]
 *
 * Backends are node:http servers in child processes; autocannon runs in this process; HAProxy is
 * the machine's (Debian 2.6). Results: docs/benchmarks.md ("Load balancers").
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { checkConfig, defaultHaproxyBinary } from '../providers/haproxy/haproxy.process';
import type { LbListener } from '../providers/lb.provider';

const DURATION = Number(process.argv[2] ?? 10);
const CONNECTIONS = Number(process.argv[3] ?? 32);
const RELOADS = 20;
const SERVICE_ID = 1;

async function startBackend(name: string): Promise<{ port: number; child: ChildProcess }> {
  const child = fork(path.join(__dirname, 'lb-backend.ts'), [name], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`backend ${name} exited with ${code}`)));
  });
  return { port, child };
}

async function load(url: string) {
  await autocannon({ url, connections: CONNECTIONS, duration: 2 }); // warm-up
  const r = await autocannon({ url, connections: CONNECTIONS, duration: DURATION });
  return {
    requests_per_s: Math.round(r.requests.average),
    latency_p50_ms: r.latency.p50,
    latency_p99_ms: r.latency.p99,
    errors: r.errors + r.timeouts + r.non2xx,
  };
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};

async function main() {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'lb-bench-'));
  const lb = new HaproxyLbProvider({ dataDir, bindAddress: `127.201.${Math.floor(Math.random() * 250)}.0/24` });
  const backends = [await startBackend('one'), await startBackend('two')];
  const listener = (ports: number[], weights = ports.map(() => 1)): LbListener => ({
    name: 'web',
    protocol: 'http',
    port: 18_080,
    algorithm: 'roundrobin',
    health_check: { path: '/', interval_seconds: 2 },
    backends: ports.map((port, i) => ({ ip: '127.0.0.1', port, weight: weights[i] })),
  });
  try {
    const status = await lb.create(SERVICE_ID, [listener([backends[0].port])]);
    const through = `http://${status.address}:18080/`;
    const results: Record<string, unknown> = {};
    results.direct_one_backend = await load(`http://127.0.0.1:${backends[0].port}/`);
    results.balancer_one_backend = await load(through);
    await lb.apply(SERVICE_ID, [listener(backends.map((b) => b.port))]);
    results.balancer_two_backends = await load(through);

    // Configuration changes on an idle balancer: the whole apply, and `haproxy -c` alone.
    const applyMs: number[] = [];
    for (let i = 0; i < RELOADS; i++) {
      const started = performance.now();
      await lb.apply(SERVICE_ID, [
        listener(
          backends.map((b) => b.port),
          [1 + (i % 2), 1],
        ),
      ]);
      applyMs.push(performance.now() - started);
    }
    const checkMs: number[] = [];
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      await checkConfig(defaultHaproxyBinary(), path.join(dataDir, `svc-${SERVICE_ID}`, 'haproxy.cfg'));
      checkMs.push(performance.now() - started);
    }
    results.apply_idle_ms = { p50: Math.round(percentile(applyMs, 50)), p95: Math.round(percentile(applyMs, 95)), max: Math.round(Math.max(...applyMs)) };
    results.haproxy_check_ms = { p50: Math.round(percentile(checkMs, 50)) };

    // The same changes while autocannon keeps the balancer busy.
    let reloading = true;
    const underLoadMs: number[] = [];
    const reloader = (async () => {
      await new Promise((r) => setTimeout(r, 1_000));
      for (let i = 0; reloading && i < RELOADS; i++) {
        const started = performance.now();
        await lb.apply(SERVICE_ID, [
          listener(
            backends.map((b) => b.port),
            [1, 1 + (i % 2)],
          ),
        ]);
        underLoadMs.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const r = await autocannon({ url: through, connections: CONNECTIONS, duration: DURATION });
    reloading = false;
    await reloader;
    results.reloads_under_load = {
      reloads: underLoadMs.length,
      apply_ms: { p50: Math.round(percentile(underLoadMs, 50)), p95: Math.round(percentile(underLoadMs, 95)), max: Math.round(Math.max(...underLoadMs)) },
      requests_per_s: Math.round(r.requests.average),
      answered: r['2xx'],
      errors: r.errors,
      resets: r.resets,
      timeouts: r.timeouts,
      non2xx: r.non2xx,
    };
    console.log(JSON.stringify({ connections: CONNECTIONS, seconds_per_run: DURATION, ...results }, null, 2));
  } finally {
    await lb.destroy(SERVICE_ID);
    for (const b of backends) b.child.kill();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
