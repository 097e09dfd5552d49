import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { isoSql, preparedQuery } from '../../db/knex';
import { ReadBatcher } from '../../db/read-batcher';
import type { TemporalGateway } from '../../infra/temporal';
import { operationStateQuery } from '../../workflows/kit/operation';
import { DomainError, notFound } from '../errors';
import { canSeeService, type Principal } from '../principal';
import { presentOperation, TERMINAL, type OperationRow, type OperationState, type OperationView } from './contract';

const FIND_VISIBLE_SQL =
  'select q.n, o.id, o.account_id, o.type, o.status, o.progress, o.resource_object, o.resource_id, o.service_id, o.result, o.error, ' +
  `${isoSql('o.created_at')} as created_at, ${isoSql('o.completed_at')} as completed_at ` +
  "from unnest(string_to_array($1, ','), string_to_array($2, ',')::bigint[]) with ordinality as q(id, account_id, n) " +
  'join operations o on o.id = q.id and o.account_id = q.account_id';

interface CacheEntry {
  at: number;
  state: OperationState;
}

/**
 * Reads of an operation: from PostgreSQL once it is finished, from a (cached) query of its
 * workflow while it runs, and from PostgreSQL again (`stale: true`) when the workflow does not answer.
 */
export class OperationReads {
  private readonly cache = new Map<string, CacheEntry>();
  /** Workflow queries out, by operation id (queryState). */
  private readonly queries = new Map<string, Promise<OperationState>>();

  private readonly rows = new ReadBatcher<{ id: string; accountId: number }, OperationRow>(async (keys) => {
    // The keys as comma-separated text, not arrays: the driver escapes every element of an array
    // parameter, and these need none (`op_` and a ULID; account numbers).
    const rows = await preparedQuery<OperationRow & { n: string | number }>(this.db, 'operations-find-visible', FIND_VISIBLE_SQL, [
      keys.map((k) => k.id).join(','),
      keys.map((k) => k.accountId).join(','),
    ]);
    return rows.map(({ n, ...row }) => ({ n: Number(n) - 1, row }));
  });

  constructor(
    private readonly db: Knex,
    private readonly temporal: TemporalGateway,
    private readonly opts: { cacheTtlMs: number; queryTimeoutMs: number; logger: Logger },
  ) {}

  /** Loads a row the principal may see, or throws 404. */
  async findVisible(principal: Principal, id: string): Promise<OperationRow> {
    // The batch sends its keys comma-separated (FIND_VISIBLE_SQL): an id with a comma is none of ours.
    if (id.includes(',')) throw notFound('operation');
    // Every GET /v1/operations/{id} reads this row: one prepared statement for the concurrent ones.
    const [row] = await this.rows.load({ id, accountId: principal.accountId });
    if (!row || (row.service_id !== null && !canSeeService(principal, row.service_id))) throw notFound('operation');
    return row;
  }

  async get(principal: Principal, id: string): Promise<OperationView> {
    const row = await this.findVisible(principal, id);
    if (TERMINAL.has(row.status)) return presentOperation(row);
    const cached = this.cache.get(id);
    if (cached && Date.now() - cached.at < this.opts.cacheTtlMs) return presentOperation(row, cached.state);
    try {
      return presentOperation(row, await this.queryState(id));
    } catch (err) {
      if (err instanceof DomainError) throw err;
      // A workflow that has just closed answers from PostgreSQL, which it updated before closing.
      const fresh = await this.db('operations').where({ id }).first();
      if (fresh && TERMINAL.has(fresh.status)) return presentOperation(fresh);
      this.opts.logger.warn({ operation: id, err: (err as Error).message }, 'operation query failed; serving stored state');
      return presentOperation(fresh ?? row, undefined, true);
    }
  }

  /**
   * The running workflow's state by query, one query per operation at a time: the requests that
   * find the cached state expired while a query is out wait for that query's answer (or failure)
   * instead of sending their own (under load, every in-flight request did).
   */
  private queryState(id: string): Promise<OperationState> {
    const pending = this.queries.get(id);
    if (pending) return pending;
    // An answer is cached only if nothing forgot this operation's state while it was out (forget).
    const query: Promise<OperationState> = this.temporal
      .withDeadline(this.opts.queryTimeoutMs, () => this.temporal.handle(id).query(operationStateQuery))
      .then((state) => {
        if (this.queries.get(id) === query) {
          this.cache.set(id, { at: Date.now(), state });
          this.pruneCache();
        }
        return state;
      })
      .finally(() => {
        if (this.queries.get(id) === query) this.queries.delete(id);
      });
    this.queries.set(id, query);
    return query;
  }

  /** Drops the cached state of an operation whose row changed here, and any query out for it. */
  forget(id: string): void {
    this.cache.delete(id);
    this.queries.delete(id);
  }

  private pruneCache(): void {
    if (this.cache.size < 10_000) return;
    const cutoff = Date.now() - this.opts.cacheTtlMs;
    for (const [key, entry] of this.cache) if (entry.at < cutoff) this.cache.delete(key);
  }
}
