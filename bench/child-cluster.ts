/**
 * Runs a bench server child (bench/api-child.ts, bench/bare-express.ts) as BENCH_PROCESSES
 * processes on one port (node:cluster), so that one API process and several can be measured the
 * same way. The primary relays the parent's messages to every process and answers once all have
 * answered (`ready` with the shared port, `flushed`, `bodies-set`); `stop` stops them all.
 */
import cluster from 'node:cluster';

type Reply = { type: string; [key: string]: unknown };
const REPLIES: Record<string, string> = { flush: 'flushed', bodies: 'bodies-set', 'profile-start': 'profile-started', 'profile-stop': 'profile-stopped' };

/** True when this process serves (a single process, or a cluster worker); false in the relaying primary. */
export function servesHere(): boolean {
  const n = Number(process.env.BENCH_PROCESSES ?? 1);
  if (n <= 1 || !cluster.isPrimary) return true;
  const workers = Array.from({ length: n }, () => cluster.fork());
  const pending = new Map<string, Reply[]>();
  const collect = (reply: Reply) => {
    const list = pending.get(reply.type) ?? [];
    list.push(reply);
    pending.set(reply.type, list);
    if (list.length < n) return;
    pending.delete(reply.type);
    process.send!({ ...list[0], pids: list.map((r) => r.pid) });
  };
  for (const worker of workers) worker.on('message', collect);
  process.on('message', (msg: { type: string }) => {
    if (msg.type === 'stop') {
      let left = n;
      for (const worker of workers) {
        worker.once('exit', () => {
          if (--left === 0) process.exit(0);
        });
        worker.send(msg);
      }
      return;
    }
    if (!(msg.type in REPLIES)) return;
    for (const worker of workers) worker.send(msg);
  });
  process.on('disconnect', () => process.exit(0));
  return false;
}
