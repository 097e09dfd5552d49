import type { Knex } from 'knex';
import type { KvStore } from './kv.provider';
import { RedisKvStore } from './redis/kv.redis';
import { RedisServer } from './redis/redis.server';
import { PostgresKvStore } from './simulator/kv.simulator';

/**
 * The kv store a configuration asks for (KV_BACKEND): this host's Redis, started (or adopted when it
 * runs) in `redisDataDir`, or the fallback on PostgreSQL (`simulator`). The choice stays inside
 * providers/, like every backend's (docs/adding-a-family.md).
 */
export async function createKvStore(options: { backend: 'redis' | 'simulator'; redisDataDir: string; db: Knex }): Promise<KvStore> {
  if (options.backend === 'simulator') return new PostgresKvStore(options.db);
  const redis = await RedisServer.start({ dataDir: options.redisDataDir });
  return new RedisKvStore(redis.adminConnection());
}

/**
 * Starts this host's Redis again if it stops (a crash, an operator's kill): a check every
 * `intervalMs` that adopts the running server or starts it, as the other local servers' keepers do.
 * The store's connections reconnect by themselves. Returns the stop.
 */
export function keepKvServer(options: {
  backend: 'redis' | 'simulator';
  redisDataDir: string;
  intervalMs?: number;
  onError?: (err: Error) => void;
}): () => void {
  if (options.backend !== 'redis') return () => undefined;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    RedisServer.start({ dataDir: options.redisDataDir })
      .catch((err: Error) => options.onError?.(err))
      .finally(() => (running = false));
  }, options.intervalMs ?? 10_000);
  timer.unref();
  return () => clearInterval(timer);
}
