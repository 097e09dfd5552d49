import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Node 24 LTS everywhere: the tests themselves, `npm start`, the Docker image, `engines` and the
 * lockfile (whose `node` package brings the binary npm scripts run first).
 */
const root = path.resolve(__dirname, '..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const major = (version: string) => Number(version.replace(/^v/, '').split('.')[0]);

describe('runtime', () => {
  it('runs the suite on Node 24 or newer', () => {
    expect(major(process.versions.node)).toBeGreaterThanOrEqual(24);
  });

  it('pins Node 24 in engines, the lockfile and the Docker image', () => {
    const pkg = JSON.parse(read('package.json'));
    expect(pkg.engines.node).toBe('>=24');
    expect(major(pkg.devDependencies.node.replace(/^[\^~]/, ''))).toBe(24);
    const lock = JSON.parse(read('package-lock.json'));
    expect(major(lock.packages['node_modules/node'].version)).toBe(24);
    expect(read('Dockerfile')).toMatch(/^ARG NODE_IMAGE=node:24-slim$/m);
  });

  it("makes npm start and npm test use the project's Node and refuse an older one", () => {
    for (const script of ['scripts/start.sh', 'scripts/test.sh']) {
      const text = read(script);
      expect(text, script).toContain('export PATH="$PWD/node_modules/.bin:$PATH"');
      expect(text, script).toContain('bash scripts/require-node.sh');
    }
    // The check itself, run with this process's Node first on PATH, passes and names the version.
    const out = execFileSync('bash', ['scripts/require-node.sh'], {
      cwd: root,
      env: { ...process.env, PATH: `${path.dirname(process.execPath)}:${process.env.PATH}` },
    }).toString();
    expect(out).toContain(`node v${process.versions.node}`);
  });
});
