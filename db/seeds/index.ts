import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { families as allFamilies, type FamilyManifest } from '../../families';
import { seedCore, type DemoPasswords, type SeedOutcome } from './core.seed';
import type { Config } from '../../common/config';
import type { Providers } from '../../providers';
import type { LbBackendTarget } from '../../providers/lb.provider';

/**
 * Demo data for local runs (`npm start`): core first, then each family's own seed (its manifest's
 * `seed`, in the order of families/index.ts). Idempotent.
 */
export async function seedDemo(
  db: Knex,
  passwords: DemoPasswords,
  providers: Providers,
  /**
   * `keyring` seals the admin passwords of the seeded database services; `config` names the DNS
   * servers; `demoBackends` are the web servers the seeded load balancer's demo listener sends to.
   */
  options: { apiPort?: number; keyring: Keyring; config: Config; demoBackends?: LbBackendTarget[]; families?: readonly FamilyManifest[] },
): Promise<SeedOutcome> {
  const core = await seedCore(db, passwords);
  for (const family of options.families ?? allFamilies) {
    await family.seed?.({
      db,
      providers,
      keyring: options.keyring,
      config: options.config,
      apiPort: options.apiPort ?? 3000,
      demoBackends: options.demoBackends,
    });
  }
  return core;
}
