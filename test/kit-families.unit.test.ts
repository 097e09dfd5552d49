import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FAMILIES } from '../common/families';
import { families, familyBackends } from '../families';
import { skeletonFamily } from './fixtures/skeleton-family/manifest';

/**
 * The family manifests agree with what they cannot reach: the workflow bundle (bundled by path, so
 * its entry re-exports each family's folder by hand) and the documentation of their settings.
 */
const root = path.resolve(__dirname, '..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

/** The folders an entry re-exports (`export * from './vps'`), from the repository's root. */
function reExported(entry: string): string[] {
  const dir = path.posix.dirname(entry);
  return [...read(entry).matchAll(/^export \* from '(\.[^']+)';/gm)].map((m) => path.posix.join(dir, m[1]));
}

describe('family manifests', () => {
  it('each family is listed once, under a catalog family or a platform part', () => {
    const names = families.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    const known = [...FAMILIES.map((f) => f.name as string), 'orders', 'webhooks', 'hosts'];
    expect(names.filter((n) => !known.includes(n))).toEqual([]);
  });

  it('each backend is its family’s: one field of Providers each, behind that family’s outage switch', () => {
    const backends = familyBackends();
    expect(backends.map((b) => b.key)).toEqual(['hypervisor', 'lb', 'dbaas', 'dns', 'objectstorage', 'wordpress', 'caas']);
    for (const family of families) if (family.backend) expect(family.backend.family).toBe(family.name);
  });

  it('the workflow bundle re-exports exactly the families’ workflow folders', () => {
    const declared = families.flatMap((f) => (f.workflows ? [f.workflows] : []));
    for (const folder of declared) expect(existsSync(path.join(root, folder, 'index.ts')), `${folder}/index.ts`).toBe(true);
    // workflows/services is the platform's (service teardown), not a family's.
    expect(reExported('workflows/index.ts').filter((f) => f !== 'workflows/services/service-teardown.workflow')).toEqual(declared);
    // The test bundle adds the skeleton family's folder to the product's.
    expect(reExported('test/fixtures/workflows.ts')).toContain(skeletonFamily.workflows);
  });

  it('every setting a family reads is described in docs/configuration.md', () => {
    const doc = read('docs/configuration.md');
    const missing = families.flatMap((f) => (f.config ?? []).filter((key) => !doc.includes(`\`${key}\``)));
    expect(missing).toEqual([]);
  });

  it('activity and route names do not collide between families', () => {
    const operationIds = families.flatMap((f) => [...f.routes, ...(f.devRoutes ?? [])].map((r) => r.operationId));
    expect(new Set(operationIds).size).toBe(operationIds.length);
  });
});
