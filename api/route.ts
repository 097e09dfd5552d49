import type { Request, Response } from 'express';
import { type z } from 'zod';
import type { AppDeps } from './deps';
import type { Principal } from '../domain/principal';

/**
 * One declarative route table drives both the Express router and the OpenAPI document
 * (api/openapi.ts), so the two cannot drift apart.
 */
export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** SPEC legend: R reversible, D destructive, A asynchronous (202 + operation), I idempotent. */
export type Mark = 'R' | 'D' | 'A' | 'I';

export type CredentialRule =
  /** Any valid API key or session. */
  | 'credential'
  /** Sessions only (API keys get 403 session_required). */
  | 'session'
  /** Public: no credential is read. */
  | 'none';

export interface HandlerResult<B = unknown> {
  status?: number;
  body?: B;
  headers?: Record<string, string>;
}

type ZObject = z.ZodObject<z.ZodRawShape>;
type Infer<T> = T extends z.ZodType ? z.infer<T> : undefined;

export interface HandlerContext<P, Q, B, Auth> {
  params: P;
  query: Q;
  body: B;
  principal: Auth;
  deps: AppDeps;
  req: Request;
  res: Response;
  requestId: string;
}

export interface ResponseSpec {
  status: number;
  description: string;
  schema?: z.ZodType;
  /** `text/plain` sends the body (a string) as is, e.g. a zone file; JSON otherwise. */
  contentType?: 'application/json' | 'text/plain';
}

/**
 * What a handler may answer: the input type of one of the declared response schemas (so a
 * presenter that drifts from its schema fails to compile), or anything when none is declared.
 */
export type ResponseBody<R extends readonly ResponseSpec[]> = [DeclaredSchema<R[number]>] extends [never] ? unknown : z.input<DeclaredSchema<R[number]>>;
type DeclaredSchema<S> = S extends { schema: infer Z extends z.ZodType } ? Z : never;

export interface RouteDef<
  PS extends ZObject | undefined = ZObject | undefined,
  QS extends ZObject | undefined = ZObject | undefined,
  BS extends z.ZodType | undefined = z.ZodType | undefined,
  C extends CredentialRule = CredentialRule,
  R extends readonly ResponseSpec[] = readonly ResponseSpec[],
> {
  method: HttpMethod;
  /** OpenAPI-style template: `/v1/services/{id}`. */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  /** The scope the credential needs; null for routes any valid credential (or none) may call. */
  scope: string | null;
  /** Who may call; defineRoute makes it `credential` (any valid API key or session) when left out. */
  credential: C;
  marks: Mark[];
  params?: PS;
  query?: QS;
  body?: BS;
  /** `required`: a mutation that refuses to run without `Idempotency-Key` (orders). */
  idempotencyKey?: 'optional' | 'required';
  /** Returns a secret or a credential-bearing URL: never stored for idempotent replay (convention 6). */
  returnsSecret?: boolean;
  /** Outside /v1 (health, dev stand-ins): not audited, not rate limited, not in the OpenAPI document. */
  internal?: boolean;
  /** Every status the route answers on success or by design (409, 412...), with its schema; also checked in the tests. */
  responses: R;
  /** A valid request body, shown in the OpenAPI document and sent by the generated route tests. */
  exampleBody?: unknown;
  handler: (ctx: HandlerContext<Infer<PS>, Infer<QS>, Infer<BS>, C extends 'none' ? Principal | null : Principal>) => Promise<HandlerResult<ResponseBody<R>>>;
}

// `any` here erases the per-route generics so routes of different shapes fit one table.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyRoute = RouteDef<any, any, any, any, any>;

/**
 * Gives a route literal its inferred handler types. `credential` may be left out: most routes take
 * any valid credential, and say only their scope.
 */
export function defineRoute<
  PS extends ZObject | undefined = undefined,
  QS extends ZObject | undefined = undefined,
  BS extends z.ZodType | undefined = undefined,
  C extends CredentialRule = 'credential',
  const R extends readonly ResponseSpec[] = readonly ResponseSpec[],
>(route: Omit<RouteDef<PS, QS, BS, C, R>, 'credential'> & { credential?: C }): RouteDef<PS, QS, BS, C, R> {
  return { ...route, credential: route.credential ?? ('credential' as C) };
}

export const isMutation = (method: string) => method !== 'get' && method !== 'head';

/** `/v1/services/{id}` -> `/v1/services/:id` (the form recorded as `route` in the audit log). */
export function toExpressPath(path: string): string {
  return path.replace(/\{([a-zA-Z_]+)\}/g, ':$1');
}

/**
 * A local stand-in under /_dev (DECISIONS "Local development stand-ins"): mounted only with
 * CLOUD_DEV_ENDPOINTS=1, answered only from loopback, no credential, not audited, not in OpenAPI.
 */
export function defineDevRoute<
  PS extends ZObject | undefined = undefined,
  BS extends z.ZodType | undefined = undefined,
  const R extends readonly ResponseSpec[] = readonly ResponseSpec[],
>(
  route: Pick<RouteDef<PS, undefined, BS, 'none', R>, 'method' | 'path' | 'operationId' | 'summary' | 'params' | 'body' | 'responses' | 'handler'>,
): RouteDef<PS, undefined, BS, 'none', R> {
  return { ...route, tag: 'Development', scope: null, credential: 'none', marks: [], internal: true };
}
