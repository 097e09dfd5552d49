import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['node_modules/**', '.tools/**', '.data/**', 'dist/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports', disallowTypeAnnotations: false }],
    },
  },
  {
    // The demo container app (db/seeds/caas-sample): plain CommonJS that runs inside a container.
    files: ['db/seeds/caas-sample/**/*.js'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', process: 'readonly', console: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node built-ins, no I/O libraries.
    files: ['workflows/**/*.ts', 'test/fixtures/skeleton-family/workflows/**/*.ts'],
    rules: {
      // Value imports only from the SDK and workflow code; everything else at most as types (the
      // bundle must hold no I/O, no Node-only code, and no configuration read at import time).
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({ name, message: 'Workflows must be deterministic: no Node built-ins.' })),
          patterns: [
            {
              group: ['knex', 'pg', 'objection', 'express', 'pino', 'zod', '@temporalio/client', '@temporalio/worker', '@temporalio/activity'],
              message: 'Workflows do no I/O; call an activity.',
            },
            {
              group: [
                '**/db',
                '**/db/**',
                '**/api',
                '**/api/**',
                '**/domain',
                '**/domain/**',
                '**/infra',
                '**/infra/**',
                '**/providers',
                '**/providers/**',
                '**/common/**',
                // Names the workflows share with the control plane, in a module with no imports.
                '!**/common/hosts',
                '**/activities',
                '**/activities/**',
              ],
              allowTypeImports: true,
              message:
                'Workflows import activities, providers and domain code as types only (proxyActivities); values would pull Node-only code into the bundle.',
            },
          ],
        },
      ],
      'no-restricted-globals': ['error', { name: 'setTimeout', message: 'Use sleep() from @temporalio/workflow.' }],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'Date.now() is replayed deterministically by the SDK, but prefer workflowInfo() time or sleep().' },
        { object: 'Math', property: 'random', message: 'Use uuid4() from @temporalio/workflow.' },
      ],
    },
  },
  {
    // Tests read JSON bodies of many shapes; `any` there keeps assertions readable.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
