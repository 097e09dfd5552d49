import { z } from 'zod';
import type { Principal } from '../domain/principal';
import type { AppDeps } from './deps';
import { listEnvelope, pageOfItems, paginationQuery } from './pagination';
import { defineRoute, type Mark, type ResponseSpec } from './route';
import { listOf, OperationSchema } from './schemas';
import type { Accepted } from './start-operation';

/**
 * Route presets: the shapes that families repeat, written once. A preset returns an ordinary route
 * of the table (so Express, OpenAPI, the CLI, MCP and the generated tests see nothing special);
 * the family says only what differs.
 */

type ZObject = z.ZodObject<z.ZodRawShape>;
/** The parsed body of a preset route (undefined when it declares none). */
type BodyOf<BS> = BS extends z.ZodType ? z.infer<BS> : undefined;

/** What a preset's own functions get of the request: validated input, the caller, the dependencies. */
export interface PresetContext<PS extends ZObject, BS> {
  params: z.infer<PS>;
  body: BodyOf<BS>;
  principal: Principal;
  deps: AppDeps;
}

/** The description and metadata every preset route gives, as defineRoute takes them. */
interface PresetRouteInfo<PS extends ZObject, BS extends z.ZodType | undefined> {
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  scope: string;
  /** SPEC's legend (R, D, I; an asynchronous action has A too), as the OpenAPI document shows them. */
  marks: Mark[];
  params: PS;
  body?: BS;
  exampleBody?: unknown;
  /** Answers besides the success (a 409 while the resource has no backend record yet, a 412...). */
  otherResponses?: ResponseSpec[];
}

/** The fields of `info` that a preset route passes to defineRoute as given (optional ones only when set). */
function routeInfo<PS extends ZObject, BS extends z.ZodType | undefined>(info: PresetRouteInfo<PS, BS>) {
  return {
    path: info.path,
    operationId: info.operationId,
    summary: info.summary,
    ...(info.description === undefined ? {} : { description: info.description }),
    tag: info.tag,
    scope: info.scope,
    marks: info.marks,
    params: info.params,
    ...(info.body === undefined ? {} : { body: info.body }),
    ...(info.exampleBody === undefined ? {} : { exampleBody: info.exampleBody }),
  };
}

/**
 * A list that a backend returns whole, under one resource (a VPS's IPs, templates and backups, a
 * database service's databases, users and backups, a balancer's listeners and backends): a GET any
 * credential with `scope` may call, paginated with the same opaque cursors as database lists.
 */
export function defineBackendList<PS extends ZObject, Target, Item, S extends z.ZodType>(
  spec: Omit<PresetRouteInfo<PS, undefined>, 'marks' | 'body' | 'exampleBody'> & {
    /** Each item's schema, and the list's name in OpenAPI (`VpsBackupList`). */
    item: S;
    listId: string;
    /** What the 200 lists (`Backups`). */
    listed: string;
    /** The resource the path names, found the family's way (404, 400, 409: findTarget). */
    target: (ctx: { params: z.infer<PS>; principal: Principal; deps: AppDeps }) => Promise<Target>;
    /** The whole list, from the backend (or the resource's record). */
    items: (target: Target, deps: AppDeps) => Promise<readonly Item[]> | readonly Item[];
    /** The cursor's list name (`listFingerprint(...)`): a cursor of one list is refused by another. */
    list: (target: Target) => string;
    /** Orders the items (ascending); unique per item, carried by the cursor. */
    sortKey: (item: Item) => string;
    present: (item: Item) => z.input<S>;
  },
) {
  return defineRoute({
    method: 'get',
    ...routeInfo({ ...spec, marks: [] }),
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

/**
 * A synchronous write (docs/adding-a-family.md "Synchronous write or operation"): a change the
 * backend makes at once, answered when it is made: `201` with what a POST created, `200` with the
 * changed resource, `204` with nothing (SPEC conventions). The preset finds the target first (404,
 * 400, 409: findTarget), then calls `write`, and answers with the declared status; the family says
 * what the target is and what the write does.
 */
export function defineSyncWrite<PS extends ZObject, BS extends z.ZodType | undefined, Target, S extends z.ZodType | undefined = undefined>(
  spec: PresetRouteInfo<PS, BS> & {
    method: 'post' | 'put' | 'patch' | 'delete';
    /** Returns a secret (a console ticket, a password): never stored for an idempotent replay. */
    returnsSecret?: boolean;
    /** The success: its status, what it is, and its schema (none for a 204). */
    answer: { status: 200 | 201 | 204; description: string; schema?: S };
    /** The resource the path names, found the family's way (findTarget: 404, 400, then 409 for a change). */
    target: (ctx: PresetContext<PS, BS>) => Promise<Target>;
    /** Makes the change on the backend (and the control plane's record of it); returns the answer's body. */
    write: (target: Target, ctx: PresetContext<PS, BS>) => Promise<S extends z.ZodType ? z.input<S> : void>;
  },
) {
  const { answer } = spec;
  return defineRoute({
    method: spec.method,
    ...routeInfo(spec),
    ...(spec.returnsSecret ? { returnsSecret: true } : {}),
    responses: [
      { status: answer.status, description: answer.description, ...(answer.schema ? { schema: answer.schema } : {}) },
      ...(spec.otherResponses ?? []),
    ] as ResponseSpec[],
    async handler({ params, body, principal, deps }) {
      // (`params` and `body` are the parsed `spec.params` and `spec.body`: the route type cannot see through the generics.)
      const ctx = { params: params as z.infer<PS>, body: body as BodyOf<BS>, principal, deps };
      const result = await spec.write(await spec.target(ctx), ctx);
      return answer.status === 204 ? { status: 204 } : { status: answer.status, body: result };
    },
  });
}

/**
 * An asynchronous action (SPEC convention 5, mark `A`): a POST that answers `202` with the operation
 * it started, whose workflow does the work. The family's `start` finds the target and calls
 * `startOperation` (with its guards and claims); the preset declares the 202 and its operation type.
 */
export function defineAsyncAction<PS extends ZObject, BS extends z.ZodType | undefined = undefined>(
  spec: PresetRouteInfo<PS, BS> & {
    /** The operation type it starts (`vps.power`), named in the 202's description. */
    operation: string;
    start: (ctx: PresetContext<PS, BS>) => Promise<Accepted>;
  },
) {
  if (!spec.marks.includes('A')) throw new Error(`${spec.operationId}: an asynchronous action is marked A`);
  return defineRoute({
    method: 'post',
    ...routeInfo(spec),
    responses: [{ status: 202, description: `The \`${spec.operation}\` operation`, schema: OperationSchema }, ...(spec.otherResponses ?? [])],
    async handler({ params, body, principal, deps }) {
      return spec.start({ params: params as z.infer<PS>, body: body as BodyOf<BS>, principal, deps });
    },
  });
}
