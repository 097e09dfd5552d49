import type { z } from 'zod';
import { buildRouteTable } from '../../api/routes';
import { ErrorSchema } from '../../api/schemas';
import type { AnyRoute } from '../../api/route';

/**
 * Checks a response the suite received against what its route declares: a 2xx must be one of the
 * route's declared statuses and match that status's schema; an error must be the error envelope.
 * Every response of every test goes through here (test/helpers/http.ts), so a presenter that
 * drifts from its schema, or a status nobody declared, fails the test that saw it.
 */
interface Matcher {
  route: AnyRoute;
  re: RegExp;
  /** Literal characters in the template: the most specific route wins. */
  weight: number;
}

let matchers: Matcher[] | null = null;

function table(): Matcher[] {
  matchers ??= buildRouteTable({ devEndpoints: true }).map((route) => ({
    route,
    re: new RegExp(
      `^${route.path
        .split(/\{[a-zA-Z_]+\}/)
        .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
        .join('[^/]+')}$`,
    ),
    weight: route.path.replace(/\{[a-zA-Z_]+\}/g, '').length,
  }));
  return matchers;
}

export function routeFor(method: string, path: string): AnyRoute | null {
  const m = method.toLowerCase();
  const candidates = table().filter((x) => x.route.method === m && x.re.test(path));
  candidates.sort((a, b) => b.weight - a.weight);
  return candidates[0]?.route ?? null;
}

export class ResponseContractError extends Error {
  override name = 'ResponseContractError';
}

export function checkResponse(method: string, url: string, status: number, contentType: string | null, body: unknown): void {
  const path = new URL(url, 'http://x').pathname;
  if (!path.startsWith('/v1/')) return;
  const route = routeFor(method, path);
  const where = `${method} ${path} -> ${status}`;
  if (status >= 400) {
    const parsed = ErrorSchema.safeParse(body);
    if (!parsed.success) throw new ResponseContractError(`${where}: not the error envelope: ${parsed.error.message}`);
    return;
  }
  if (!route) throw new ResponseContractError(`${where}: no route in the table matches`);
  const spec = route.responses.find((r: { status: number }) => r.status === status);
  if (!spec)
    throw new ResponseContractError(
      `${where}: status not declared by ${route.operationId} (declares ${route.responses.map((r: { status: number }) => r.status).join(', ')})`,
    );
  const schema = spec.schema as z.ZodType | undefined;
  if (!schema || status === 204) return;
  if (!contentType?.includes('json')) return;
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw new ResponseContractError(`${where}: body does not match ${route.operationId}'s declared schema: ${parsed.error.message}`);
}
