import { defineConfig } from 'vitest/config';

/**
 * Three tiers, one run (`npm test` runs them all; docs/testing.md):
 * - unit: pure modules (validation, config, parsers, address rules, lint rules). No PostgreSQL, no
 *   Temporal, no server: `npm run test:unit` runs them in seconds. New ones: `*.unit.test.ts`.
 * - real: tests whose subject is a real backend server (PowerDNS, HAProxy, PostgreSQL and MariaDB
 *   instances, the OS accounts and local-server kit they run under). They ask `startStack` for the
 *   real backend explicitly. New ones: `*.real.test.ts`, or a name below.
 * - stack: everything else: a database per file (cloned from a template migrated once per run) and a
 *   Temporal namespace per stack on the worker's shared dev server, backends simulated.
 */
const UNIT = [
  'test/**/*.unit.test.ts',
  'test/api-client.test.ts',
  'test/client-reachability.test.ts',
  'test/config.test.ts',
  'test/dbaas.instance-errors.test.ts',
  'test/dbaas.validation.test.ts',
  'test/dns.validation.test.ts',
  'test/kit-boundaries.test.ts',
  'test/lb.listeners.test.ts',
  'test/runtime.test.ts',
  'test/webhooks-delivery-client.test.ts',
  'test/webhooks-docs.test.ts',
  // Chromium against a loopback page: no database, no Temporal.
  'test/wordpress.pagespeed.test.ts',
  'test/workflow-lint.test.ts',
];

const REAL = [
  'test/**/*.real.test.ts',
  'test/dbaas.http.*.test.ts',
  'test/dbaas.isolation.*.test.ts',
  'test/dbaas.mariadb.test.ts',
  'test/dbaas.postgresql.test.ts',
  'test/dbaas.restart-idempotency.test.ts',
  'test/dns.http.test.ts',
  'test/dns.isolation.test.ts',
  'test/dns.orders.test.ts',
  'test/dns.powerdns*.test.ts',
  'test/haraka*.test.ts',
  'test/lb.haproxy*.test.ts',
  'test/lb.http.test.ts',
  'test/lb.orders.test.ts',
  'test/lb.seed.test.ts',
  'test/lb.targets.test.ts',
  'test/local-run*.test.ts',
  'test/mailgateway.http.test.ts',
  'test/os-accounts.test.ts',
];

export default defineConfig({
  test: {
    pool: 'forks',
    // One process per worker runs file after file (set TEST_ISOLATE=1 for a process per file, to
    // rule out a leak between files): the app's modules load once per worker instead of once per
    // file, and the worker's Temporal dev server outlives each file (test/helpers/temporal.ts).
    isolate: process.env.TEST_ISOLATE === '1',
    // I/O-bound (servers, timers), so a little over the core count.
    maxWorkers: Number(process.env.TEST_WORKERS ?? 3),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      {
        extends: true,
        test: {
          name: 'stack',
          include: ['test/**/*.test.ts'],
          exclude: [...UNIT, ...REAL],
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/helpers/per-file.ts'],
        },
      },
      { extends: true, test: { name: 'real', include: REAL, globalSetup: ['test/global-setup.ts'], setupFiles: ['test/helpers/per-file.ts'] } },
    ],
  },
});
