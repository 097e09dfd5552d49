import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { launchChromium } from '../scripts/docs-screenshot';

/**
 * GET /docs: Swagger UI over the served OpenAPI document, loaded in Debian's headless Chromium.
 * Every asset comes from this server; the page shows every tag, and scope and marks per operation.
 */
let stack: Stack;
let browser: Awaited<ReturnType<typeof launchChromium>>;

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await stack?.close();
});

describe('GET /docs', () => {
  it('serves the page and its Swagger UI assets from this server, nothing else', async () => {
    const page = await stack.http.get('/docs');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    const sources = [...page.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    for (const src of sources) {
      expect(src.startsWith('/'), `${src} is not served by this server`).toBe(true);
      expect((await stack.http.get(src)).status, src).toBe(200);
    }
    expect(sources).toContain('/docs/assets/swagger-ui-bundle.js');
    expect((await stack.http.get('/docs/assets/index.html')).status).toBe(404);
    expect((await stack.http.get('/docs/assets/..%2Fpackage.json')).status).toBe(404);
  });

  it('renders in headless Chromium without console errors, with every tag and the scope and marks of each operation', async () => {
    const doc = (await stack.http.get('/v1/openapi.json')).body;
    const tags: string[] = doc.tags.map((t: any) => t.name);
    const operations = Object.values<any>(doc.paths).flatMap((item) => Object.values<any>(item));

    const page = await browser.context.newPage();
    const problems: string[] = [];
    const foreign: string[] = [];
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
    });
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()} ${req.failure()?.errorText}`));
    page.on('request', (req) => {
      if (!req.url().startsWith(stack.url) && !req.url().startsWith('data:')) foreign.push(req.url());
    });

    const response = await page.goto(`${stack.url}/docs`, { waitUntil: 'networkidle' });
    expect(response?.status()).toBe(200);
    await page.waitForSelector('.opblock-tag-section', { timeout: 30_000 });

    const shownTags = await page.$$eval('.opblock-tag', (els) => els.map((el) => el.getAttribute('data-tag')));
    expect(shownTags.sort()).toEqual([...tags].sort());
    // Tags start collapsed (Swagger UI 5 stops rendering once about 130 operations are open at
    // once): each is opened, read and closed again.
    const summaries: string[] = [];
    for (const tag of tags) {
      const count = operations.filter((op) => op.tags?.[0] === tag).length;
      const section = `.opblock-tag[data-tag="${tag}"]`;
      await page.click(section);
      await page.waitForFunction(`document.querySelectorAll('.opblock-summary-description').length >= ${count}`, undefined, { timeout: 10_000 });
      summaries.push(...(await page.$$eval('.opblock-summary-description', (els) => els.map((el) => el.textContent ?? ''))));
      await page.click(section);
      await page.waitForFunction("document.querySelectorAll('.opblock-summary-description').length === 0", undefined, { timeout: 10_000 });
    }
    expect(summaries).toHaveLength(operations.length);
    for (const op of operations) {
      const scope = op['x-cloud-scope'] ?? (op['x-cloud-credential'] === 'none' ? 'public' : 'any credential');
      const marks = op['x-cloud-marks'].length ? ` · ${op['x-cloud-marks'].join(' ')}` : '';
      const expected = `${op.summary}  [${scope}${op['x-cloud-credential'] === 'session' ? ' · session only' : ''}${marks}]`;
      expect(summaries, op.operationId).toContain(expected);
    }

    // An operation opened: its scope and marks spelled out.
    await page.click('.opblock-tag[data-tag="Virtual servers"]');
    await page.click('#operations-Virtual_servers-powerVps .opblock-summary-control');
    await page.waitForSelector('#operations-Virtual_servers-powerVps .opblock-description-wrapper', { timeout: 10_000 });
    const body = await page.textContent('#operations-Virtual_servers-powerVps');
    expect(body).toContain('Scope: vps:power');
    expect(body).toContain('Marks: R (reversible), A (asynchronous: answers 202 with an operation), I (idempotent)');

    expect(foreign).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });
});
