import type { Knex } from 'knex';
import { seedCore, type DemoPasswords } from './core.seed';
import { seedOrders } from './orders.seed';
import { seedDns } from './dns.seed';
import { seedVps } from './vps.seed';
import type { Config } from '../../common/config';
import type { Providers } from '../../providers';

/** Demo data for local runs (`npm start`): core first, then each family's own seed. Idempotent. */
export async function seedDemo(db: Knex, passwords: DemoPasswords, providers: Providers, config: Config): Promise<{ createdUsers: boolean }> {
  const core = await seedCore(db, passwords);
  await seedOrders(db);
  await seedVps(db, providers);
  await seedDns(db, providers, config);
  return core;
}
