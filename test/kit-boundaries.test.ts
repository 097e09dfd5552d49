import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The family kit's boundaries, checked on the source: simulators are reached only through the
 * provider registry, no provider writes the control plane's tables (the domain keeps those), and
 * the layers import in one direction (the domain knows nothing of the API and its clients).
 */
const root = path.resolve(__dirname, '..');
const PRODUCTION = [
  'api',
  'activities',
  'cli',
  'client',
  'common',
  'dataplane',
  'db',
  'domain',
  'families',
  'infra',
  'mcp',
  'providers',
  'scripts',
  'workers',
  'workflows',
];

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) return sources(full);
    return full.endsWith('.ts') ? [full] : [];
  });
}

const files = PRODUCTION.flatMap((dir) => sources(path.join(root, dir))).map((file) => ({ file: path.relative(root, file), text: readFileSync(file, 'utf8') }));

/** Tables of the control plane: its own records, never written by a backend. */
const CONTROL_PLANE_TABLES = [
  'accounts',
  'users',
  'credentials',
  'api_keys',
  'sessions',
  'services',
  'operations',
  'events',
  'orders',
  'webhooks',
  'webhook_deliveries',
  'audit_logs',
  'idempotency_keys',
  'vps_servers',
];

/** Every relative import of a file (static, `export ... from`, dynamic and require; type-only too), as repository paths. */
function importsOf(file: string, text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|\brequire\s*\(\s*|^import\s+)['"](\.{1,2}\/[^'"]+)['"]/gm)].map((m) => m[1]);
  return specs.map((spec) => path.posix.normalize(path.posix.join(path.posix.dirname(file), spec)));
}

const known = new Set(files.map(({ file }) => file));
/** An import's module as a file of the tree (`x` is `x.ts` or `x/index.ts`), or null for anything else (package.json). */
const resolveModule = (target: string) => [`${target}.ts`, `${target}/index.ts`].find((candidate) => known.has(candidate)) ?? null;
const graph = new Map(
  files.map(({ file, text }) => [
    file,
    importsOf(file, text)
      .map(resolveModule)
      .filter((t): t is string => t !== null),
  ]),
);

/** `from` imports a file under one of `folders` (each a path prefix such as `api/`). */
function importsUnder(from: (file: string) => boolean, folders: string[]): string[] {
  return [...graph]
    .filter(([file]) => from(file))
    .flatMap(([file, targets]) => targets.filter((t) => folders.some((folder) => t.startsWith(folder))).map((t) => `${file} -> ${t}`));
}

/** The files that can reach themselves again through `file`'s imports (its strongly connected component). */
function loopThrough(file: string): string[] {
  const reach = (start: string, edges: (f: string) => string[]) => {
    const seen = new Set<string>();
    const todo = [start];
    while (todo.length) {
      for (const next of edges(todo.pop()!)) {
        if (seen.has(next)) continue;
        seen.add(next);
        todo.push(next);
      }
    }
    return seen;
  };
  const forward = reach(file, (f) => graph.get(f) ?? []);
  const backward = reach(file, (f) => [...graph].filter(([, targets]) => targets.includes(f)).map(([from]) => from));
  return [...forward].filter((f) => backward.has(f)).sort();
}

describe('kit boundaries', () => {
  it('no code outside providers/ imports a simulator or checks instanceof one', () => {
    const offenders = files
      .filter(({ file }) => !file.startsWith('providers/'))
      .filter(({ text }) => /from '[^']*\/simulator\/[^']*'/.test(text) || /instanceof \w+Simulator\b/.test(text))
      .map(({ file }) => file);
    expect(offenders).toEqual([]);
  });

  it('no provider writes a control-plane table', () => {
    const writes = new RegExp(`\\(\\s*'(${CONTROL_PLANE_TABLES.join('|')})'\\s*\\)[\\s\\S]{0,200}?\\.(insert|update|delete|increment|decrement)\\(`, 'g');
    const offenders = files
      .filter(({ file }) => file.startsWith('providers/'))
      .flatMap(({ file, text }) => [...text.matchAll(writes)].map((m) => `${file}: ${m[1]}.${m[2]}`))
      // A read followed later by an unrelated write of the provider's own table would match the
      // window above; the provider's own tables are prefixed (sim_*) or billing's.
      .filter((hit) => !/sim_|billing_|invoices|service_billing|promo_codes/.test(hit));
    expect(offenders).toEqual([]);
  });

  it('providers do not import the domain, the API or activities', () => {
    // Rules a backend enforces live with its provider (providers/lb.rules.ts, providers/dns.values.ts);
    // the domain uses them and adds the API's 400 (domain/lb/listeners.ts, domain/dns/values.ts), never the other way round.
    const offenders = files
      .filter(({ file }) => file.startsWith('providers/'))
      // Static imports, and dynamic import() and require() too.
      .flatMap(({ file, text }) =>
        [...text.matchAll(/(?:from |import\(|require\()\s*['"]((\.\.\/)+(domain|api|activities|workers)\/[^'"]*)['"]/g)].map((m) => `${file}: ${m[1]}`),
      );
    expect(offenders).toEqual([]);
  });

  it('the domain imports nothing from the API or its clients (api/, mcp/, cli/, client/)', () => {
    // Business errors are the domain's (domain/errors.ts); the API maps them to HTTP once (api/app.ts).
    expect(importsUnder((f) => f.startsWith('domain/'), ['api/', 'mcp/', 'cli/', 'client/'])).toEqual([]);
  });

  it('infrastructure (infra/) imports no domain module', () => {
    expect(importsUnder((f) => f.startsWith('infra/'), ['domain/', 'api/', 'activities/', 'workflows/'])).toEqual([]);
  });

  it('the API does not import its clients, and MCP does not import the CLI (what they share is in client/)', () => {
    expect(importsUnder((f) => f.startsWith('api/') && f !== 'api/bootstrap.ts', ['mcp/', 'cli/'])).toEqual([]);
    expect(importsUnder((f) => f.startsWith('mcp/'), ['cli/'])).toEqual([]);
    // The one place that wires MCP in beside /v1.
    expect(importsUnder((f) => f === 'api/bootstrap.ts', ['mcp/'])).toEqual(['api/bootstrap.ts -> mcp/http.ts']);
  });

  it('the family manifests (families/) are read by the registries only, never by the layers they assemble', () => {
    // A manifest imports a family's routes, provisioner, activities, backend and seed: the domain,
    // providers, infrastructure and workflows are given what they need (a provisioner list, backend
    // specs) instead of reading the list themselves.
    expect(importsUnder((f) => /^(domain|providers|infra|common|workflows)\//.test(f), ['families/'])).toEqual([]);
    expect(importsUnder((f) => f.startsWith('families/'), ['workflows/'])).toEqual([]);
  });

  it('no import loop runs through the operations modules', () => {
    // A module that needs one part (a guard's type, the contract, the transitions) imports that part,
    // never the service that puts start, read and transitions together; the workflow kit names the
    // contract's types (workflows/kit/operation.ts) instead of declaring them.
    const modules = [...graph.keys()].filter((f) => f.startsWith('domain/operations/') || f === 'domain/operations.ts');
    expect(modules.length).toBeGreaterThanOrEqual(5);
    expect(modules.map((file) => ({ file, loop: loopThrough(file) }))).toEqual(modules.map((file) => ({ file, loop: [] })));
  });

  it('finds a loop when there is one (so the checks above and below can fail)', () => {
    expect(loopThrough('workers/background.ts')).toContain('workers/teardown-sweeper.ts');
    expect(importsUnder((f) => f === 'api/app.ts', ['domain/'])).not.toEqual([]);
  });
});
