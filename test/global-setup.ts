import { bundleWorkflowCode } from '@temporalio/worker';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { adminDatabaseUrl } from './helpers/db';
import { reapOrphanedAccounts } from '../providers/os-accounts';

/**
 * Once per run: check PostgreSQL answers, and bundle the workflows (production ones plus the
 * test-only fixtures) so that each test file's worker starts without webpack.
 */
export default async function setup(project: TestProject) {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  try {
    await client.connect();
    await client.query('select 1');
  } catch (err) {
    throw new Error(`PostgreSQL does not answer at ${adminDatabaseUrl()} (run "npm test", which starts it): ${(err as Error).message}`);
  } finally {
    await client.end().catch(() => undefined);
  }
  const { code } = await bundleWorkflowCode({
    workflowsPath: path.resolve(__dirname, 'fixtures/workflows.ts'),
    logger: { info() {}, warn() {}, error: console.error, debug() {}, trace() {}, log() {} } as never,
  });
  const dir = mkdtempSync(path.join(tmpdir(), 'cloud-wf-'));
  const codePath = path.join(dir, 'workflow-bundle.js');
  writeFileSync(codePath, code);
  project.provide('workflowBundlePath', codePath);
  // Tests give database instances and load balancers OS accounts of their own, in temporary
  // directories: a run killed half way leaves accounts whose directory is gone. Removed before and
  // after each run, so they never pile up on a machine (system ids are a small range).
  await reapOrphanedAccounts();
  return async () => {
    await reapOrphanedAccounts();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    workflowBundlePath: string;
  }
}
