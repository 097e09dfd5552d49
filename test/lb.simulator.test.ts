import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { createAccount, createService } from './helpers/fixtures';
import { LbSimulator } from '../providers/simulator/lb.simulator';
import { describeLbContract, freePort, httpListener, testBindRange, type LbContractSubject } from './lb.contract';
import { balancerAddress } from '../providers/lb.provider';

/** The PostgreSQL-backed stand-in for HAProxy (LB_BACKEND=simulator) keeps the provider contract. */
let database: TestDatabase;
let accountId: number;
const created: LbContractSubject['created'] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  ({ accountId } = await createAccount(database.db));
});
afterAll(() => database?.drop());

const subject = (): LbContractSubject => ({
  provider: (bindAddress) => new LbSimulator(database.db, { bindAddress, delayScale: 0 }),
  newServiceId: async () => (await createService(database.db, accountId, { family: 'lb' })).serviceId,
  created,
});

describeLbContract('simulator', subject);

describe('simulator: backend health', () => {
  it('shows a checked backend marked as not answering down, and its listener down once no backend is up', async () => {
    const range = testBindRange();
    const sim = new LbSimulator(database.db, { bindAddress: range, delayScale: 0 });
    const { serviceId } = await createService(database.db, accountId, { family: 'lb' });
    await sim.create(serviceId);
    const port = await freePort(balancerAddress(range, serviceId));
    const check = { health_check: { path: '/healthz', interval_seconds: 1 } };
    await sim.apply(serviceId, [
      httpListener(
        'web',
        port,
        [
          { ip: '10.0.0.1', port: 80 },
          { ip: '10.0.0.2', port: 80 },
        ],
        check,
      ),
    ]);
    await sim.setBackendHealth(serviceId, 'web', '10.0.0.2', 80, 'down');
    let [web] = (await sim.stats(serviceId)).listeners;
    expect(web.backends.map((b) => b.health)).toEqual(['up', 'down']);
    expect(web.state).toBe('up');
    await sim.setBackendHealth(serviceId, 'web', '10.0.0.1', 80, 'down');
    [web] = (await sim.stats(serviceId)).listeners;
    expect(web.state).toBe('down');
    expect((await sim.status(serviceId)).healthy).toBe(false);
    // A backend that leaves the set takes its mark with it.
    await sim.apply(serviceId, [httpListener('web', port, [{ ip: '10.0.0.1', port: 80 }], check)]);
    await sim.apply(serviceId, [
      httpListener(
        'web',
        port,
        [
          { ip: '10.0.0.1', port: 80 },
          { ip: '10.0.0.2', port: 80 },
        ],
        check,
      ),
    ]);
    [web] = (await sim.stats(serviceId)).listeners;
    expect(web.backends.map((b) => b.health)).toEqual(['down', 'up']);
  });
});
