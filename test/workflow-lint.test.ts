import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

/**
 * The lint rule that keeps Node-only code out of the workflow bundle really stops it: value imports
 * of the domain, configuration, providers, database or API fail under workflows/, type imports pass.
 */
const root = path.resolve(__dirname, '..');

/** The lines the rule flags. */
async function lintWorkflow(code: string): Promise<number[]> {
  const eslint = new ESLint({ cwd: root });
  const [result] = await eslint.lintText(code, { filePath: path.join(root, 'workflows/vps/vps-power.workflow.ts') });
  return result.messages
    .filter((m) => m.ruleId === '@typescript-eslint/no-restricted-imports')
    .map((m) => m.line)
    .filter((line, i, all) => all.indexOf(line) === i);
}

describe('workflow import rule', () => {
  it('refuses value imports of Node-only code and allows type imports and the kit', { timeout: 60_000 }, async () => {
    const refused = await lintWorkflow(
      [
        "import { findServer } from '../../domain/vps/store';",
        "import { loadConfig } from '../../common/config';",
        "import { createProviders } from '../../providers';",
        "import { BackendUnavailableError } from '../../providers/errors';",
        "import { createDb } from '../../db/knex';",
        "import knex from 'knex';",
        "import fs from 'node:fs';",
        'export const x = [findServer, loadConfig, createProviders, BackendUnavailableError, createDb, knex, fs];',
      ].join('\n'),
    );
    expect(refused).toEqual([1, 2, 3, 4, 5, 6, 7]);
    const allowed = await lintWorkflow(
      [
        "import type { Providers } from '../../providers';",
        "import type { VpsActivities } from '../../activities/vps/activities';",
        "import { runOperation } from '../kit/steps';",
        "import { proxyActivities } from '@temporalio/workflow';",
        'export type X = Providers | VpsActivities;',
        'export const y = [runOperation, proxyActivities];',
      ].join('\n'),
    );
    expect(allowed).toEqual([]);
  });
});
