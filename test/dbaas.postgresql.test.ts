import { afterAll, beforeAll, describe } from 'vitest';
import { dbaasContract } from './dbaas.support';
import { realHarness, realInstanceTests, type RealHarness } from './dbaas.instances.support';

/**
 * The DBaaS provider on real PostgreSQL instances (providers/dbinstances/): each one its own server
 * process on this machine, under a temporary root. One instance is shared by the file's tests.
 */
let harness: RealHarness;

beforeAll(async () => {
  harness = await realHarness('postgresql');
});
afterAll(() => harness?.close());

describe('PostgreSQL instances: the provider contract', () => {
  dbaasContract(() => harness);
});

describe('PostgreSQL instances: what only a real server shows', () => {
  realInstanceTests(() => harness);
});
