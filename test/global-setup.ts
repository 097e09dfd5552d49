import { bundleWorkflowCode } from '@temporalio/worker';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { adminDatabaseUrl, createTemplateDatabase, dropStaleTemplates } from './helpers/db';
import { reapOrphanedAccounts } from '../providers/os-accounts';

/** What the run shares with every test file (test/helpers/per-file.ts reads it). */
interface RunContext {
  workflowBundlePath: string;
  templateDatabase: string;
  runDir: string;
}

/**
 * Once per run, for the tiers that need servers (the `stack` and `real` projects both list this file;
 * the second reuses the first's work): check PostgreSQL answers, bundle the workflows (production
 * ones plus the test-only fixtures) so that each file's worker starts without webpack, and migrate a
 * template database that each file's database is cloned from (test/helpers/db.ts).
 */
export default async function setup(project: TestProject) {
  const shared = globalThis as { __cloudTestRun?: { context: Promise<RunContext>; users: number } };
  shared.__cloudTestRun ??= { context: prepare(), users: 0 };
  shared.__cloudTestRun.users++;
  const context = await shared.__cloudTestRun.context;
  project.provide('workflowBundlePath', context.workflowBundlePath);
  project.provide('templateDatabase', context.templateDatabase);
  project.provide('testRunDir', context.runDir);
  return async () => {
    if (--shared.__cloudTestRun!.users > 0) return;
    shared.__cloudTestRun = undefined;
    await finish(context);
  };
}

async function prepare(): Promise<RunContext> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  try {
    await client.connect();
    await client.query('select 1');
  } catch (err) {
    throw new Error(`PostgreSQL does not answer at ${adminDatabaseUrl()} (run "npm test", which starts it): ${(err as Error).message}`);
  } finally {
    await client.end().catch(() => undefined);
  }
  const runDir = mkdtempSync(path.join(tmpdir(), 'cloud-test-run-'));
  const [{ code }, templateDatabase] = await Promise.all([
    bundleWorkflowCode({
      workflowsPath: path.resolve(__dirname, 'fixtures/workflows.ts'),
      logger: { info() {}, warn() {}, error: console.error, debug() {}, trace() {}, log() {} } as never,
    }),
    dropStaleTemplates().then(() => createTemplateDatabase()),
  ]);
  const workflowBundlePath = path.join(runDir, 'workflow-bundle.js');
  writeFileSync(workflowBundlePath, code);
  // Tests give database instances and load balancers OS accounts of their own, in temporary
  // directories: a run killed half way leaves accounts whose directory is gone. Removed before and
  // after each run, so they never pile up on a machine (system ids are a small range).
  await reapOrphanedAccounts();
  return { workflowBundlePath, templateDatabase: templateDatabase.name, runDir };
}

async function finish(context: RunContext): Promise<void> {
  // The workers' Temporal dev servers stop with their worker; one whose worker was killed is stopped here.
  for (const file of readdirSync(context.runDir).filter((f) => f.endsWith('.pid'))) {
    const pid = Number(readFileSync(path.join(context.runDir, file), 'utf8'));
    try {
      // Only if that pid is still a Temporal server (a pid is reused once its process is gone).
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start-dev')) process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  rmSync(context.runDir, { recursive: true, force: true });
  const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
  await admin.connect();
  await admin.query(`drop database if exists ${context.templateDatabase} with (force)`).finally(() => admin.end());
  await reapOrphanedAccounts();
}

declare module 'vitest' {
  export interface ProvidedContext {
    workflowBundlePath: string;
    /** The migrated database each file's database is cloned from (CREATE DATABASE ... TEMPLATE). */
    templateDatabase: string;
    /** A directory of this run: the workers' Temporal dev servers leave their pid here. */
    testRunDir: string;
  }
}
