import { afterAll, beforeAll, describe } from 'vitest';
import { dbaasContract } from './dbaas.support';
import { realHarness, realInstanceTests, type RealHarness } from './dbaas.instances.support';

/**
 * The DBaaS provider on real MariaDB instances (providers/dbinstances/): each one its own server
 * process on this machine, under a temporary root. One instance is shared by the file's tests.
 */
let harness: RealHarness;

beforeAll(async () => {
  harness = await realHarness('mysql');
});
afterAll(() => harness?.close());

describe('MariaDB instances: the provider contract', () => {
  dbaasContract(() => harness);
});

describe('MariaDB instances: what only a real server shows', () => {
  realInstanceTests(() => harness);
});
