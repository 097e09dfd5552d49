import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import sample from '../db/seeds/wordpress-sample-recipe.json';
import { sampleRecipe } from '../db/seeds/wordpress-recipes.seed';
import { checkRequires, parseManifest, parseWpCommand } from '../domain/wordpress/recipes';
import { CATALOG_DIR } from '../providers/wordpress/plugin-directory';
import { constantNameAllowed } from '../providers/wordpress/site-files';

/**
 * The sample recipe the demo seed registers (db/seeds/wordpress-sample-recipe.json): a valid
 * `recipe/v1` manifest, and one the real backend can apply on a fresh site of the platform.
 */
describe('the sample recipe starter-blog', () => {
  it('is a valid recipe/v1 manifest, returned as written', () => {
    const manifest = parseManifest(structuredClone(sample));
    expect(manifest).toEqual(sample);
    expect(manifest).toMatchObject({ apiVersion: 'recipe/v1', name: 'starter-blog', version: '1.0.0' });
    expect(sampleRecipe()).toEqual(manifest);
  });

  it('has plugins, constants, options, a role, a secret and checks of both kinds', () => {
    const m = sampleRecipe();
    expect(m.requires).toEqual({ php: '>=8.1 <9', wp: '>=6.1', memory_mb: 128 });
    expect(m.plugins).toEqual([
      { slug: 'cloud-hello', version: '1.1.0', activate: true },
      { slug: 'akismet', version: '5.0.2', activate: false },
    ]);
    expect(m.constants).toMatchObject({ WP_POST_REVISIONS: 5 });
    expect(m.options).toMatchObject({ blogdescription: expect.any(String), timezone_string: 'UTC' });
    expect(m.roles?.map((r) => r.name)).toEqual(['editor_lite']);
    expect(m.secrets).toEqual(['STARTER_API_KEY']);
    for (const check of m.verify ?? []) if (check.wp !== undefined) expect(parseWpCommand(check.wp), check.wp).not.toBeNull();
    expect(m.verify?.some((c) => c.http?.path === '/')).toBe(true);
  });

  it('the real backend takes every constant and secret (none is one the site configuration reserves)', () => {
    const m = sampleRecipe();
    for (const name of [...Object.keys(m.constants ?? {}), ...(m.secrets ?? [])]) expect(constantNameAllowed(name), name).toBe(true);
  });

  it("the local plugin directory has cloud-hello at the recipe's pin", () => {
    expect(existsSync(path.join(CATALOG_DIR, 'cloud-hello', '1.1.0', 'cloud-hello', 'cloud-hello.php'))).toBe(true);
  });

  it('a fresh site of the platform meets its requirements (PHP 8.2, WordPress 6.1.9, 256M)', () => {
    expect(checkRequires(sampleRecipe().requires, { phpVersion: '8.2', wpVersion: '6.1.9', memoryLimit: '256M' })).toEqual([]);
    expect(checkRequires(sampleRecipe().requires, { phpVersion: '8.0', wpVersion: '6.0.3', memoryLimit: '64M' })).toEqual(['php', 'wp', 'memory_mb']);
  });
});
