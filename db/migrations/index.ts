import type { Knex } from 'knex';
import * as core from './20261122000001_core';
import * as orders from './20261122000200_orders';
import * as webhooks from './20261122000300_webhooks';
import * as vps from './20261122000100_vps';
import * as kit from './20261123000001_kit';
import * as billing from './20261123000002_billing';
import * as lb from './20261123000300_lb';
import * as dbaas from './20261123000200_dbaas';
import * as dns from './20261123000100_dns';
import * as hardening from './20261123000400_hardening';
import * as rateLimits from './20261124001400_rate_limits';
import * as operationsUnfinished from './20261125000500_operations_unfinished';
import * as operationsStart from './20261125000600_operations_start';
import * as hosts from './20261125000700_hosts';
import * as hostTransfers from './20261125000800_host_transfers';
import * as objectstorage from './20261125000900_objectstorage';
import * as images from './20261125001000_images';
import * as mailgateway from './20261126000100_mailgateway';
import * as mailIdempotency from './20261126000200_mail_idempotency';
import * as serverless from './20261126000300_serverless';
import * as caas from './20261126000400_caas';
import * as wordpress from './20261126000500_wordpress';
import * as wordpressDownloads from './20261126000600_wordpress_downloads';

/**
 * Migrations are listed here rather than discovered on disk, so that they run the same under
 * tsx, vitest and a bundled build. Append new migrations at the end; never reorder.
 *
 * Never rename one either: its name is its row in `knex_migrations`, and a database that ran it
 * under the old name would run it again. So `_kit` (simulator tasks, armed faults, teardown marks)
 * and `_hardening` (event and operation visibility, sign-in throttle, idempotency ownership) keep
 * the names of the issues they came with; their doc comments say what they hold.
 */
const migrations: Array<[string, Knex.Migration]> = [
  ['20261122000001_core', core],
  ['20261122000200_orders', orders],
  ['20261122000300_webhooks', webhooks],
  ['20261122000100_vps', vps],
  ['20261123000001_kit', kit],
  ['20261123000002_billing', billing],
  ['20261123000300_lb', lb],
  ['20261123000200_dbaas', dbaas],
  ['20261123000100_dns', dns],
  ['20261123000400_hardening', hardening],
  ['20261124001400_rate_limits', rateLimits],
  ['20261125000500_operations_unfinished', operationsUnfinished],
  ['20261125000600_operations_start', operationsStart],
  ['20261125000700_hosts', hosts],
  ['20261125000800_host_transfers', hostTransfers],
  ['20261125000900_objectstorage', objectstorage],
  ['20261125001000_images', images],
  ['20261126000100_mailgateway', mailgateway],
  ['20261126000200_mail_idempotency', mailIdempotency],
  ['20261126000300_serverless', serverless],
  ['20261126000400_caas', caas],
  ['20261126000500_wordpress', wordpress],
  ['20261126000600_wordpress_downloads', wordpressDownloads],
];

export const migrationSource: Knex.MigrationSource<[string, Knex.Migration]> = {
  getMigrations: async () => migrations,
  getMigrationName: ([name]) => name,
  getMigration: async ([, migration]) => migration,
};
