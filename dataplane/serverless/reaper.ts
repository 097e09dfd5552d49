import type { Knex } from 'knex';
import type { Primitive } from '../../domain/serverless/plans';

interface Planes {
  kv: { drop(handle: string): Promise<void> } | null;
  sql: { drop(handle: string): Promise<void> } | null;
  functions: { drop(handle: string): Promise<void> } | null;
  cron: { drop(serviceId: number): Promise<void> };
}

/**
 * Removes what an ended tenant (its service terminated or cancelled) left on the data planes'
 * backends: the kv entries and ACL user, the SQLite files, the workerd process, the Temporal
 * Schedules. Then marks it `dropped_at`. The teardown workflow's deprovision has already retired the
 * tokens and stopped the schedules from sending; this runs where the backends are (this process), a
 * pass every few seconds, and a tenant whose removal fails is tried again at the next pass.
 */
export class Reaper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly options: { db: Knex; planes: Planes; intervalMs: number; onError: (err: Error) => void }) {}

  start(): void {
    this.timer ??= setInterval(() => void this.pass().catch((err) => this.options.onError(err)), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  pass(): Promise<void> {
    this.running ??= this.once().finally(() => (this.running = null));
    return this.running;
  }

  private async once(): Promise<void> {
    const { db, planes } = this.options;
    const ended: Array<{ service_id: string; primitive: Primitive; handle: string }> = await db('serverless_tenants as t')
      .join('services as s', 's.id', 't.service_id')
      .whereIn('s.status', ['terminated', 'cancelled'])
      .whereNull('t.dropped_at')
      // Only the primitives this process serves: another process removes the others'.
      .whereIn(
        't.primitive',
        (['cron', 'kv', 'db', 'functions'] as const).filter((p) => (p === 'db' ? planes.sql : p === 'cron' ? planes.cron : planes[p]) !== null),
      )
      .select('t.service_id', 't.primitive', 't.handle');
    for (const tenant of ended) {
      const serviceId = Number(tenant.service_id);
      try {
        if (tenant.primitive === 'kv') await planes.kv!.drop(tenant.handle);
        if (tenant.primitive === 'db') {
          await planes.sql!.drop(tenant.handle);
          await db('serverless_db_namespaces').where({ service_id: serviceId }).delete();
        }
        if (tenant.primitive === 'functions') {
          await planes.functions!.drop(tenant.handle);
          await db('serverless_functions').where({ service_id: serviceId }).delete();
        }
        if (tenant.primitive === 'cron') await planes.cron.drop(serviceId);
        await db('serverless_tenants').where({ service_id: serviceId }).update({ dropped_at: db.fn.now() });
      } catch (err) {
        this.options.onError(err as Error);
      }
    }
  }
}
