import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The family kit's boundaries, checked on the source: simulators are reached only through the
 * provider registry, and no provider writes the control plane's tables (the domain keeps those).
 */
const root = path.resolve(__dirname, '..');
const PRODUCTION = ['api', 'activities', 'common', 'db', 'domain', 'providers', 'scripts', 'workers', 'workflows'];

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
});
