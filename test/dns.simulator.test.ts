import { afterAll, beforeAll, describe } from 'vitest';
import { DnsSimulator } from '../providers/simulator/dns.simulator';
import { dnsProviderContract } from './dns.provider.contract';
import { createTestDatabase, type TestDatabase } from './helpers/db';

/** The DNS provider contract against the PostgreSQL simulator (DNS_BACKEND=simulator). */
let database: TestDatabase;
let simulator: DnsSimulator;
beforeAll(async () => {
  database = await createTestDatabase();
  simulator = new DnsSimulator(database.db, 0);
});
afterAll(async () => {
  await database?.drop();
});

describe('DNS simulator: provider contract', () => {
  dnsProviderContract(() => simulator);
});
