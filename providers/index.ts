import type { Knex } from 'knex';
import type { Config } from '../common/config';
import { BackendSwitchboard } from './simulator/switchboard';

/**
 * Every backend the control plane talks to, behind its provider interface. The embedded default is
 * the simulator (state in PostgreSQL, work that takes SIM_DELAY_SCALE-scaled time, outages on demand).
 * Families register their provider here.
 */
export interface Providers {
  switchboard: BackendSwitchboard;
}

export function createProviders({ db }: { db: Knex; config: Config }): Providers {
  const switchboard = new BackendSwitchboard(db);
  return { switchboard };
}
