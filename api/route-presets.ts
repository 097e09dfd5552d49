import { z } from 'zod';
import type { Principal } from '../domain/principal';
import type { AppDeps } from './deps';
import { listEnvelope, pageOfItems, paginationQuery } from './pagination';
import { defineRoute, type ResponseSpec } from './route';
import { listOf } from './schemas';

/**
 * Route presets: the shapes that families repeat, written once. A preset returns an ordinary route
 * of the table (so Express, OpenAPI, the CLI, MCP and the generated tests see nothing special);
 * the family says only what differs.
 */

type ZObject = z.ZodObject<z.ZodRawShape>;

/**
 * A list that a backend returns whole, under one resource (a VPS's IPs, templates and backups, a
 * database service's databases, users and backups, a balancer's listeners and backends): a GET any
 * credential with `scope` may call, paginated with the same opaque cursors as database lists.
 */
export function defineBackendList<PS extends ZObject, Target, Item, S extends z.ZodType>(spec: {
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  scope: string;
  params: PS;
  /** Each item's schema, and the list's name in OpenAPI (`VpsBackupList`). */
  item: S;
  listId: string;
  /** What the 200 lists (`Backups`). */
  listed: string;
  /** Answers besides the 200 (a 409 while the resource has no backend record yet). */
  otherResponses?: ResponseSpec[];
  /** The resource the path names, found the family's way (404, 400, 409: findTarget). */
  target: (ctx: { params: z.infer<PS>; principal: Principal; deps: AppDeps }) => Promise<Target>;
  /** The whole list, from the backend (or the resource's record). */
  items: (target: Target, deps: AppDeps) => Promise<readonly Item[]> | readonly Item[];
  /** The cursor's list name (`listFingerprint(...)`): a cursor of one list is refused by another. */
  list: (target: Target) => string;
  /** Orders the items (ascending); unique per item, carried by the cursor. */
  sortKey: (item: Item) => string;
  present: (item: Item) => z.input<S>;
}) {
  return defineRoute({
    method: 'get',
    path: spec.path,
    operationId: spec.operationId,
    summary: spec.summary,
    ...(spec.description === undefined ? {} : { description: spec.description }),
    tag: spec.tag,
    scope: spec.scope,
    marks: [],
    params: spec.params,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: spec.listed, schema: listOf(spec.item, spec.listId) }, ...(spec.otherResponses ?? [])],
    async handler({ params, query, principal, deps }) {
      // (`params` is the parsed `spec.params`: the route type cannot see through the generic.)
      const target = await spec.target({ params: params as z.infer<PS>, principal, deps });
      const page = pageOfItems(deps.cursors, spec.list(target), await spec.items(target, deps), spec.sortKey, query);
      return { body: listEnvelope(page.data.map(spec.present), page) };
    },
  });
}
