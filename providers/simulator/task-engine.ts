import type { Knex } from 'knex';
import { newUlidId } from '../../common/ids';

/**
 * The simulators' shared model of work that takes time, as real backends run it: a call queues a
 * task and returns at once; the task runs after the subject's earlier tasks (one at a time per
 * subject, like a machine lock), takes `durationMs × SIM_DELAY_SCALE`, and takes effect when its
 * end time has passed. Every read first settles the subject's due tasks under a lock, so the API
 * and any number of workers agree. A request key makes enqueueing idempotent (an activity that
 * retries gets the same task), and a fault armed with `failNext` makes the subject's next task
 * end in error without effect. State lives in PostgreSQL (`sim_tasks`, `sim_task_faults`).
 */
export type SimTaskStatus = 'running' | 'ok' | 'error';

export interface SimTask<P = Record<string, unknown>> {
  id: string;
  backend: string;
  subject: string;
  kind: string;
  params: P;
  status: SimTaskStatus;
  error: string | null;
  startsAt: Date;
  endsAt: Date;
}

interface SimTaskRow {
  id: string;
  backend: string;
  subject: string;
  request_key: string | null;
  kind: string;
  params: Record<string, unknown>;
  status: SimTaskStatus;
  will_fail: string | null;
  error: string | null;
  starts_at: Date;
  ends_at: Date;
}

export interface EnqueueTask {
  backend: string;
  /** What the task works on (a vmid, a service id); tasks of one subject run one after another. */
  subject: string | number;
  kind: string;
  params?: Record<string, unknown>;
  /** The same key returns the same task. */
  key: string;
  /** How long the task takes at SIM_DELAY_SCALE 1. */
  durationMs: number;
  /** The backend's own task id format (a Proxmox UPID); a ulid otherwise. */
  id?: (kind: string) => string;
}

/** What a settled task did: nothing to report, or an error that replaces its effect. */
export type TaskEffect = void | { error: string };

const toTask = (row: SimTaskRow): SimTask => ({
  id: row.id,
  backend: row.backend,
  subject: row.subject,
  kind: row.kind,
  params: row.params,
  status: row.status,
  error: row.error,
  startsAt: new Date(row.starts_at),
  endsAt: new Date(row.ends_at),
});

export class SimulatedTasks {
  constructor(
    private readonly db: Knex,
    /** SIM_DELAY_SCALE. */
    readonly scale: number,
  ) {}

  /** Serialises work on one subject inside a transaction (queueing and settling). */
  async lock(trx: Knex.Transaction, backend: string, subject: string | number): Promise<void> {
    await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`sim:${backend}:${subject}`]);
  }

  /** Queues a task behind the subject's unfinished ones; the same key returns the same task. */
  async enqueue(spec: EnqueueTask, trxArg?: Knex.Transaction): Promise<SimTask> {
    const run = async (trx: Knex.Transaction) => {
      const subject = String(spec.subject);
      await this.lock(trx, spec.backend, subject);
      const prior: SimTaskRow | undefined = await trx('sim_tasks').where({ request_key: spec.key }).first();
      if (prior) return toTask(prior);
      const busy = await trx('sim_tasks').where({ backend: spec.backend, subject, status: 'running' }).max('ends_at as until').first();
      const startsAt = new Date(Math.max(Date.now(), busy?.until ? new Date(busy.until).getTime() : 0));
      const endsAt = new Date(startsAt.getTime() + Math.round(spec.durationMs * this.scale));
      const fault = await this.takeFault(trx, spec.backend, subject, spec.kind);
      const [row] = await trx('sim_tasks')
        .insert({
          id: spec.id ? spec.id(spec.kind) : newUlidId('task'),
          backend: spec.backend,
          subject,
          request_key: spec.key,
          kind: spec.kind,
          params: JSON.stringify(spec.params ?? {}),
          status: 'running',
          will_fail: fault,
          starts_at: startsAt,
          ends_at: endsAt,
        })
        .returning('*');
      return toTask(row);
    };
    return trxArg ? run(trxArg) : this.db.transaction(run);
  }

  async byKey(key: string): Promise<SimTask | null> {
    const row: SimTaskRow | undefined = await this.db('sim_tasks').where({ request_key: key }).first();
    return row ? toTask(row) : null;
  }

  async get(id: string): Promise<SimTask | null> {
    const row: SimTaskRow | undefined = await this.db('sim_tasks').where({ id }).first();
    return row ? toTask(row) : null;
  }

  /** The subject's task that is running right now (started, not yet ended), if any. */
  async current(backend: string, subject: string | number, db: Knex | Knex.Transaction = this.db): Promise<SimTask | null> {
    const now = new Date();
    const row: SimTaskRow | undefined = await db('sim_tasks')
      .where({ backend, subject: String(subject), status: 'running' })
      .where('starts_at', '<=', now)
      .where('ends_at', '>', now)
      .first();
    return row ? toTask(row) : null;
  }

  /** Tasks of the backend (queued, running or done) whose params match, for lookups like "is this archive name taken". */
  async findByParam(backend: string, kind: string, param: string, value: string): Promise<SimTask | null> {
    const row: SimTaskRow | undefined = await this.db('sim_tasks').where({ backend, kind }).whereRaw('params->>? = ?', [param, value]).first();
    return row ? toTask(row) : null;
  }

  /**
   * Applies the subject's due tasks in order: `apply` makes each one's effect inside the
   * transaction (and may turn it into an error); a task armed to fail ends in error without it.
   * Cheap when nothing is due (one indexed read, no transaction).
   */
  async settle(backend: string, subject: string | number, apply: (trx: Knex.Transaction, task: SimTask) => Promise<TaskEffect>): Promise<void> {
    const key = String(subject);
    const due = await this.db('sim_tasks').where({ backend, subject: key, status: 'running' }).where('ends_at', '<=', new Date()).first();
    if (!due) return;
    await this.db.transaction(async (trx) => {
      await this.lock(trx, backend, key);
      const rows: SimTaskRow[] = await trx('sim_tasks')
        .where({ backend, subject: key, status: 'running' })
        .where('ends_at', '<=', new Date())
        .orderBy('ends_at', 'asc');
      for (const row of rows) {
        if (row.will_fail) {
          await trx('sim_tasks').where({ id: row.id }).update({ status: 'error', error: row.will_fail, finished_at: row.ends_at });
          continue;
        }
        const effect = await apply(trx, toTask(row));
        const failed = effect && 'error' in effect ? effect.error : null;
        await trx('sim_tasks')
          .where({ id: row.id })
          .update({ status: failed ? 'error' : 'ok', error: failed, finished_at: row.ends_at });
      }
    });
  }

  /** Arms a fault: the subject's next task (of `kind`, when given) ends in error with `message`, without effect. */
  async failNext(backend: string, subject: string | number, opts: { kind?: string; message?: string } = {}): Promise<void> {
    await this.db('sim_task_faults')
      .insert({ backend, subject: String(subject), kind: opts.kind ?? null, message: opts.message ?? `simulated ${backend} task failure` })
      .onConflict(['backend', 'subject'])
      .merge();
  }

  /** Removes the subject's tasks and faults (the subject was destroyed). */
  async forget(backend: string, subject: string | number, trx: Knex | Knex.Transaction = this.db): Promise<void> {
    await trx('sim_tasks')
      .where({ backend, subject: String(subject) })
      .delete();
    await trx('sim_task_faults')
      .where({ backend, subject: String(subject) })
      .delete();
  }

  private async takeFault(trx: Knex.Transaction, backend: string, subject: string, kind: string): Promise<string | null> {
    const fault = await trx('sim_task_faults').where({ backend, subject }).first();
    if (!fault || (fault.kind !== null && fault.kind !== kind)) return null;
    await trx('sim_task_faults').where({ backend, subject }).delete();
    return fault.message;
  }
}
