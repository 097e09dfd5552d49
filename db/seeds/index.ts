import type { Knex } from 'knex';
import { seedCore, type DemoPasswords, type SeedOutcome } from './core.seed';
import { seedOrders } from './orders.seed';
import { seedVps } from './vps.seed';
import type { Providers } from '../../providers';

/** Demo data for local runs (`npm start`): core first, then each family's own seed. Idempotent. */
export async function seedDemo(db: Knex, passwords: DemoPasswords, providers: Providers): Promise<SeedOutcome> {
  const core = await seedCore(db, passwords);
  await seedOrders(db);
  await seedVps(db, providers);
  return core;
}
