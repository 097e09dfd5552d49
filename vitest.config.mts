import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    // Each file gets its own database and Temporal server; I/O-bound, so a little over the core count.
    maxWorkers: Number(process.env.TEST_WORKERS ?? 3),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});
