import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { Providers } from '../../providers';
import { databaseEnvOf } from './databases';
import { envOf } from './manage';
import type { AppRow } from './store';

/** The port every app listens on inside its container (`$PORT`). */
export const APP_PORT = 8080;

/**
 * What an app's container gets at creation (a deploy or a restart): its own variables, then the
 * platform's, which win (`PORT`; `DATABASE_URL_<NAME>` for each database of the service and
 * `DATABASE_URL` for the oldest, DECISIONS "CaaS"). Values are in clear here only: the caller hands
 * them to the container and to nothing else.
 */
export async function runEnvOf(deps: { db: Knex; keyring: Keyring; providers: Providers }, app: AppRow): Promise<Record<string, string>> {
  const env = await envOf(deps.db, deps.keyring, app.id);
  return { ...env, ...(await databaseEnvOf(deps, app.service_id)), PORT: String(APP_PORT) };
}
