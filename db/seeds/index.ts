import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { seedCore, type DemoPasswords, type SeedOutcome } from './core.seed';
import { seedDbaas } from './dbaas.seed';
import { seedOrders } from './orders.seed';
import { seedDns } from './dns.seed';
import { seedVps } from './vps.seed';
import { seedLb } from './lb.seed';
import type { Config } from '../../common/config';
import type { Providers } from '../../providers';
import type { LbBackendTarget } from '../../providers/lb.provider';

/** Demo data for local runs (`npm start`): core first, then each family's own seed. Idempotent. */
export async function seedDemo(
  db: Knex,
  passwords: DemoPasswords,
  providers: Providers,
  /**
   * `keyring` seals the admin passwords of the seeded database services; `config` names the DNS
   * servers; `demoBackends` are the web servers the seeded load balancer's demo listener sends to.
   */
  options: { apiPort?: number; keyring: Keyring; config: Config; demoBackends?: LbBackendTarget[] },
): Promise<SeedOutcome> {
  const core = await seedCore(db, passwords);
  await seedOrders(db);
  await seedVps(db, providers);
  await seedDns(db, providers, options.config);
  await seedLb(db, providers, { apiPort: options.apiPort ?? 3000, demoBackends: options.demoBackends });
  await seedDbaas(db, providers, options.keyring);
  return core;
}
