import { createServerlessActivities } from '../activities/serverless/activities';
import { serverlessRoutes } from '../api/routes/serverless/routes';
import { serverlessBaseOf, ServerlessProvisioner } from '../domain/serverless/provisioner';
import { defineFamily } from './manifest';

/**
 * Serverless primitives (SPEC "Serverless"): the account's cron, db, functions and kv tenants, their
 * tokens and usage here; the primitives themselves on the project's own data planes in a process
 * of their own (dataplane/serverless: `npm run serverless`, started by `npm start`), over Redis
 * (kv), SQLite files (db), workerd under bubblewrap (functions) and Temporal Schedules (cron).
 * docs/serverless.md.
 */
export const serverlessFamily = defineFamily({
  name: 'serverless',
  routes: serverlessRoutes,
  provisioner: ({ db, config }) => new ServerlessProvisioner(db, serverlessBaseOf(config)),
  activities: (deps) => createServerlessActivities(deps),
  workflows: 'workflows/serverless',
  config: [
    'SERVERLESS_PORT',
    'SERVERLESS_API_ENDPOINT',
    'SERVERLESS_DATA_DIR',
    'KV_BACKEND',
    'CRON_MIN_INTERVAL',
    'SERVERLESS_DB_QUERY_TIMEOUT',
    'FUNCTIONS_MEMORY_MB',
    'FUNCTIONS_TIMEOUT',
  ],
});
