import { kebabCase, type ClientRoute, type JsonSchema, type RouteInput } from '../client/client-routes';

/**
 * How a route becomes `cloud <resource...> <verb> [path parameters] [--field value]`. The naming is
 * derived from the path alone, so a new family's routes become commands without code here:
 *
 * - the resource words are the static path segments after /v1 (`/v1/vps/{id}/backups` -> `vps backups`);
 *   in a family that has no `/{family}/{id}` (DNS, object storage), the collection that holds its
 *   items is left out of nested paths: `/v1/dns/zones/{zone}/records` -> `dns records`;
 * - the verb comes from the method: GET on an item `get`, GET on a list `list`, PATCH `update`, PUT
 *   `put`, DELETE `delete`, POST on a collection `create`; a POST on a segment that is not a collection
 *   is an action named by that segment (`/v1/vps/{id}/power` -> `vps power`), and a non-list GET of a
 *   segment with nothing else under it is named by the segment (`/v1/vps/{id}/config` -> `vps config`);
 * - the path parameters are positional arguments in path order;
 * - query fields and the fields of an object body are `--kebab-case` flags.
 *
 * Two routes that would get one name (none today) fall back to the operationId for the second one.
 */
export interface CommandField extends RouteInput {
  /** The long flag without dashes, e.g. `promo-code`. */
  flag: string;
}

export interface RouteCommand {
  route: ClientRoute;
  /** Group words then the verb: `['vps', 'backups', 'restore']`. */
  words: string[];
  positionals: RouteInput[];
  fields: CommandField[];
  /** The route takes a body that is not a plain object: only `--data` can give it. */
  wholeBody: JsonSchema | null;
  /** The route answers 202 with an operation (mark A): `--wait` applies. */
  async: boolean;
  /** A paginated list (`limit`/`cursor` in the query): `--all` applies. */
  paginated: boolean;
}

/** Flags every generated command has; a route field with one of these names gets a `body-`/`query-` prefix. */
export const RESERVED_FLAGS = new Set(['output', 'api-url', 'token', 'profile', 'help', 'all', 'wait', 'timeout', 'data', 'version']);

const isParam = (segment: string) => segment.startsWith('{') && segment.endsWith('}');

/** `openapi.json` -> `openapi` (a command word, not a file name). */
const word = (segment: string) => segment.replace(/\.[a-z]+$/i, '');

function segmentsOf(path: string): string[] {
  return path.split('/').slice(2);
}

function isList(route: ClientRoute): boolean {
  return route.paginated || /^list[A-Z]/.test(route.operationId);
}

function commandWords(route: ClientRoute, routes: ClientRoute[]): string[] {
  const segs = segmentsOf(route.path);
  const family = segs[0];
  const familyHasItems = routes.some((r) => {
    const s = segmentsOf(r.path);
    return s[0] === family && s.length > 1 && isParam(s[1]);
  });
  const dropped = !familyHasItems && segs.length > 3 && !isParam(segs[1]) && isParam(segs[2]) ? 1 : -1;
  const words = segs.filter((s, i) => !isParam(s) && i !== dropped).map(word);
  const last = segs[segs.length - 1];
  const hasChildren = routes.some((r) => r.path.startsWith(`${route.path}/`));
  const otherMethods = routes.some((r) => r.path === route.path && r !== route);

  if (isParam(last)) {
    const verb = { get: 'get', put: 'put', patch: 'update', delete: 'delete', post: 'create' }[route.method];
    return [...words, verb];
  }
  switch (route.method) {
    case 'get':
      if (isList(route)) return [...words, 'list'];
      // A single thing with nothing else under or beside it is named by itself (`vps config`).
      return hasChildren || otherMethods ? [...words, 'get'] : words;
    case 'post': {
      const collection = words.length === 1 || hasChildren || routes.some((r) => r.path === route.path && r.method === 'get');
      return collection ? [...words, 'create'] : words;
    }
    case 'put':
      return [...words, 'put'];
    case 'patch':
      return [...words, 'update'];
    case 'delete':
      return [...words, 'delete'];
  }
}

function flagsFor(inputs: RouteInput[], taken: Set<string>): CommandField[] {
  return inputs.map((input) => {
    let flag = kebabCase(input.name);
    if (RESERVED_FLAGS.has(flag) || taken.has(flag)) flag = `${input.in}-${flag}`;
    taken.add(flag);
    return { ...input, flag };
  });
}

let memo: { routes: ClientRoute[]; commands: RouteCommand[] } | null = null;

export function routeCommands(routes: ClientRoute[]): RouteCommand[] {
  if (memo?.routes === routes) return memo.commands;
  const commands: RouteCommand[] = [];
  const names = new Set<string>();
  const groups = new Set<string>();
  for (const route of routes) {
    let words = commandWords(route, routes);
    const key = (w: string[]) => w.join(' ');
    const clashes = (w: string[]) => names.has(key(w)) || groups.has(key(w)) || w.slice(0, -1).some((_, i) => names.has(key(w.slice(0, i + 1))));
    if (clashes(words)) words = [...words.slice(0, -1), kebabCase(route.operationId)];
    if (clashes(words)) throw new Error(`cli: ${route.method.toUpperCase()} ${route.path} has no command name of its own (${key(words)})`);
    names.add(key(words));
    for (let i = 1; i < words.length; i++) groups.add(key(words.slice(0, i)));
    const inputs = route.inputs;
    const taken = new Set<string>();
    commands.push({
      route,
      words,
      positionals: inputs.path,
      fields: flagsFor([...inputs.query, ...inputs.body], taken),
      wholeBody: inputs.wholeBody,
      async: route.marks.includes('A'),
      paginated: route.paginated,
    });
  }
  memo = { routes, commands };
  return commands;
}

/** `vps:power · R A I`, `any credential`, `apikeys:read · session only`. */
export function accessLabel(route: ClientRoute): string {
  const parts = [route.scope ?? (route.credential === 'none' ? 'public' : 'any credential')];
  if (route.credential === 'session') parts.push('session only');
  if (route.marks.length) parts.push(route.marks.join(' '));
  return parts.join(' · ');
}
