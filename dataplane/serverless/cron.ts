import {
  createSchedule,
  deleteSchedule,
  findSchedule,
  listSchedules,
  nextRunOf,
  presentSchedule,
  removeTemporalSchedule,
  type CronDeps,
} from '../../domain/serverless/cron';
import type { LiveTenant } from '../../domain/serverless/store';
import { DataPlaneError, readBody } from '../errors';
import { jsonObject, methodNotAllowed, notFound, segmentText, sendEmpty, sendJson, type Call } from './http';

const MAX_REQUEST_BYTES = 128 * 1024;
const DEFAULT_PAGE = 20;
const MAX_PAGE = 100;

/**
 * The cron data plane (DECISIONS "Serverless", cron, modelled on QStash): `POST /v1/schedules`,
 * `GET /v1/schedules` (the list envelope, newest first, `limit` and `cursor`), `GET|DELETE
 * /v1/schedules/{id}`. The schedules themselves are Temporal Schedules (domain/serverless/cron.ts).
 */
export class CronPlane {
  constructor(private readonly deps: CronDeps) {}

  async handle(call: Call, tenant: LiveTenant): Promise<void> {
    const [v1, word, id, ...rest] = call.segments;
    if (v1 !== 'v1' || word !== 'schedules' || rest.length > 0) throw notFound('cron route');
    const method = call.req.method;
    if (id === undefined || id === '') {
      if (method === 'POST') return this.create(call, tenant);
      if (method === 'GET') return this.list(call, tenant);
      throw methodNotAllowed();
    }
    if (method === 'GET') {
      const row = await findSchedule(this.deps.db, tenant, segmentText(id, 'schedule'));
      return sendJson(call, 200, presentSchedule(row, await nextRunOf(this.deps.temporal, row.id)));
    }
    if (method === 'DELETE') {
      await deleteSchedule(this.deps, tenant, segmentText(id, 'schedule'));
      return sendEmpty(call);
    }
    throw methodNotAllowed();
  }

  private async create(call: Call, tenant: LiveTenant): Promise<void> {
    const body = jsonObject(await readBody(call.req, MAX_REQUEST_BYTES));
    const made = await createSchedule(this.deps, tenant, body);
    sendJson(call, 201, presentSchedule(made.row, made.nextRunAt, made.secret));
  }

  private async list(call: Call, tenant: LiveTenant): Promise<void> {
    const limitText = call.query.get('limit');
    const limit = limitText === null ? DEFAULT_PAGE : Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
      throw new DataPlaneError(400, 'invalid_request_error', 'validation_failed', `limit: must be an integer from 1 to ${MAX_PAGE}`, 'limit');
    }
    const cursor = call.query.get('cursor');
    let after: string | null = null;
    if (cursor !== null) {
      after = Buffer.from(cursor, 'base64url').toString('utf8');
      if (!/^sched_[0-9A-Z]{26}$/.test(after))
        throw new DataPlaneError(400, 'invalid_request_error', 'invalid_cursor', 'The cursor is not one this list gave.', 'cursor');
    }
    const all = await listSchedules(this.deps.db, tenant);
    const from = after === null ? all : all.filter((r) => r.id < after!);
    const page = from.slice(0, limit);
    const hasMore = from.length > limit;
    const next = await Promise.all(page.map((r) => nextRunOf(this.deps.temporal, r.id)));
    sendJson(call, 200, {
      object: 'list',
      data: page.map((r, i) => presentSchedule(r, next[i])),
      has_more: hasMore,
      next_cursor: hasMore ? Buffer.from(page[page.length - 1].id).toString('base64url') : null,
    });
  }

  /** Removes an ended tenant's schedules from Temporal (the reaper); their rows are marked deleted. */
  async drop(serviceId: number): Promise<void> {
    const rows: Array<{ id: string }> = await this.deps.db('serverless_cron_schedules').where({ service_id: serviceId }).select('id');
    await this.deps.db('serverless_cron_schedules').where({ service_id: serviceId }).whereNull('deleted_at').update({ deleted_at: this.deps.db.fn.now() });
    for (const row of rows) await removeTemporalSchedule(this.deps.temporal, row.id);
  }
}
