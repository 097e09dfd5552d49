import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/**
 * A screenshot of the API reference page, by hand: `npx tsx scripts/docs-screenshot.ts [URL] [FILE]`
 * (default http://127.0.0.1:3000/docs, docs-reference.png) against a running API (`npm start`).
 * Uses Debian's Chromium (`CHROMIUM_PATH`, default /usr/bin/chromium); prints console errors.
 */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Headless Chromium with a fresh profile and nothing that calls out to the internet. */
export async function launchChromium(viewport = { width: 1400, height: 1000 }): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = mkdtempSync(path.join(tmpdir(), 'cloud-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    viewport,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

async function main() {
  const url = process.argv[2] ?? 'http://127.0.0.1:3000/docs';
  const file = path.resolve(process.argv[3] ?? 'docs-reference.png');
  const { context, close } = await launchChromium();
  try {
    const page = await context.newPage();
    page.on('console', (msg) => {
      if (msg.type() === 'error') console.error(`console error: ${msg.text()}`);
    });
    page.on('pageerror', (err) => console.error(`page error: ${err.message}`));
    await page.goto(url, { waitUntil: 'networkidle' });
    await page.waitForSelector('.opblock-tag-section', { timeout: 30_000 });
    await page.screenshot({ path: file, fullPage: process.env.FULL_PAGE === '1' });
    console.log(`saved ${file}`);
  } finally {
    await close();
  }
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
