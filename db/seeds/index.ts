import type { Knex } from 'knex';
import { seedCore, type DemoPasswords } from './core.seed';
import { seedOrders } from './orders.seed';
import { seedVps } from './vps.seed';
import { seedLb } from './lb.seed';
import type { Providers } from '../../providers';

/** Demo data for local runs (`npm start`): core first, then each family's own seed. Idempotent. */
export async function seedDemo(
  db: Knex,
  passwords: DemoPasswords,
  providers: Providers,
  options: { apiPort: number } = { apiPort: 3000 },
): Promise<{ createdUsers: boolean }> {
  const core = await seedCore(db, passwords);
  await seedOrders(db);
  await seedVps(db, providers);
  await seedLb(db, providers, options);
  return core;
}
