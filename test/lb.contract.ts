import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { BackendGoneError, BackendRefusedError } from '../providers/errors';
import { balancerAddress, type LbListener, type LbProvider } from '../providers/lb.provider';

/**
 * The behaviour every LbProvider shares, run against the HAProxy adapter (test/lb.haproxy.test.ts)
 * and the simulator (test/lb.simulator.test.ts), so LB_BACKEND=simulator answers like production.
 */
export interface LbContractSubject {
  /** A provider whose balancers bind `bindAddress`. */
  provider(bindAddress: string): LbProvider;
  /** A service id no balancer of this test file uses yet. */
  newServiceId(): Promise<number>;
  /** Balancers to destroy after the file. */
  created: Array<{ provider: LbProvider; serviceId: number }>;
}

/** A loopback range of its own for each test file, so parallel files never share an address. */
export function testBindRange(): string {
  return `127.${100 + Math.floor(Math.random() * 100)}.${Math.floor(Math.random() * 250)}.0/24`;
}

/** A port nothing listens on at `address` right now. */
export function freePort(address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, address, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export function httpListener(
  name: string,
  port: number,
  backends: Array<{ ip: string; port: number; weight?: number }>,
  overrides: Partial<LbListener> = {},
): LbListener {
  return {
    name,
    protocol: 'http',
    port,
    algorithm: 'roundrobin',
    health_check: null,
    backends: backends.map((b) => ({ ip: b.ip, port: b.port, weight: b.weight ?? 1 })),
    ...overrides,
  };
}

async function refusal(promise: Promise<unknown>): Promise<BackendRefusedError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BackendRefusedError);
  return err as BackendRefusedError;
}

export function describeLbContract(name: string, subject: () => LbContractSubject) {
  describe(`${name}: the LbProvider contract`, () => {
    const range = testBindRange();
    const make = async () => {
      const s = subject();
      const provider = s.provider(range);
      const serviceId = await s.newServiceId();
      s.created.push({ provider, serviceId });
      const address = balancerAddress(range, serviceId);
      return { provider, serviceId, address };
    };

    it('creates a running balancer on an address of its own, idempotently', async () => {
      const { provider, serviceId, address } = await make();
      const first = await provider.create(serviceId);
      expect(first).toEqual({ serviceId, address, state: 'running', listenerCount: 0, healthy: true });
      expect(await provider.create(serviceId)).toEqual(first);
      expect(await provider.listeners(serviceId)).toEqual([]);
    });

    it('applies a complete set and keeps it in stored form (short IPv6, an http check asks / by default)', async () => {
      const { provider, serviceId, address } = await make();
      await provider.create(serviceId);
      const [webPort, dbPort] = [await freePort(address), await freePort(address)];
      const set: LbListener[] = [
        httpListener(
          'web',
          webPort,
          [
            { ip: '127.0.0.1', port: 9 },
            { ip: '0:0:0:0:0:0:0:1', port: 9, weight: 3 },
          ],
          {
            health_check: { interval_seconds: 5 },
          },
        ),
        { name: 'db', protocol: 'tcp', port: dbPort, algorithm: 'leastconn', health_check: null, backends: [{ ip: '127.0.0.1', port: 5432, weight: 1 }] },
      ];
      const stored = await provider.apply(serviceId, set);
      expect(stored[0].backends[1]).toEqual({ ip: '::1', port: 9, weight: 3 });
      expect(stored[0].health_check).toEqual({ path: '/', interval_seconds: 5 });
      expect(await provider.listeners(serviceId)).toEqual(stored);
      expect((await provider.status(serviceId)).listenerCount).toBe(2);
    });

    it('refuses an invalid set with the failing field and keeps the applied one', async () => {
      const { provider, serviceId, address } = await make();
      await provider.create(serviceId);
      const port = await freePort(address);
      const good = [httpListener('web', port, [{ ip: '127.0.0.1', port: 8080 }])];
      const applied = await provider.apply(serviceId, good);
      const cases: Array<[LbListener[], string]> = [
        [[{ ...good[0], name: 'Web' }], 'listeners.0.name'],
        [[good[0], { ...good[0], name: 'other' }], 'listeners.1.port'],
        [[good[0], { ...good[0], port: port + 1 }], 'listeners.1.name'],
        [[{ ...good[0], backends: [] }], 'listeners.0.backends'],
        [[{ ...good[0], backends: [{ ip: '10.0.0.300', port: 80, weight: 1 }] }], 'listeners.0.backends.0.ip'],
        [[{ ...good[0], backends: [{ ip: 'backend.example.com', port: 80, weight: 1 }] }], 'listeners.0.backends.0.ip'],
        [[{ ...good[0], backends: [{ ip: '127.0.0.1', port: 0, weight: 1 }] }], 'listeners.0.backends.0.port'],
        [[{ ...good[0], backends: [{ ip: '127.0.0.1', port: 80, weight: 257 }] }], 'listeners.0.backends.0.weight'],
        [
          [
            {
              ...good[0],
              backends: [
                { ip: '::1', port: 80, weight: 1 },
                { ip: '0::1', port: 80, weight: 2 },
              ],
            },
          ],
          'listeners.0.backends.1.ip',
        ],
        [[{ ...good[0], port: 70000 }], 'listeners.0.port'],
        [[{ ...good[0], protocol: 'tcp', health_check: { path: '/healthz', interval_seconds: 2 } }], 'listeners.0.health_check.path'],
        [[{ ...good[0], health_check: { path: '/ok # and more', interval_seconds: 2 } }], 'listeners.0.health_check.path'],
        [[{ ...good[0], health_check: { interval_seconds: 0 } }], 'listeners.0.health_check.interval_seconds'],
        [[{ ...good[0], backends: [{ ip: address, port, weight: 1 }] }], 'listeners.0.backends.0.ip'],
      ];
      for (const [set, param] of cases) {
        const err = await refusal(provider.apply(serviceId, set));
        expect({ param: err.param, code: err.code }).toEqual({ param, code: 'validation_failed' });
      }
      expect(await provider.listeners(serviceId)).toEqual(applied);
    });

    it('keeps two balancers on one shared address from taking the same port', async () => {
      const shared = `${balancerAddress(testBindRange(), 7)}`;
      const s = subject();
      const provider = s.provider(shared);
      const [a, b] = [await s.newServiceId(), await s.newServiceId()];
      s.created.push({ provider, serviceId: a }, { provider, serviceId: b });
      expect((await provider.create(a)).address).toBe(shared);
      expect((await provider.create(b)).address).toBe(shared);
      const port = await freePort(shared);
      await provider.apply(a, [httpListener('web', port, [{ ip: '127.0.0.1', port: 8080 }])]);
      const err = await refusal(
        provider.apply(b, [
          httpListener('other', await freePort(shared), [{ ip: '127.0.0.1', port: 8080 }]),
          httpListener('web', port, [{ ip: '127.0.0.1', port: 8081 }]),
        ]),
      );
      expect(err.param).toBe('listeners.1.port');
      expect(await provider.listeners(b)).toEqual([]);
    });

    it('reports every listener and backend in stats; unchecked backends are unknown', async () => {
      const { provider, serviceId, address } = await make();
      await provider.create(serviceId);
      const port = await freePort(address);
      await provider.apply(serviceId, [
        { name: 'db', protocol: 'tcp', port, algorithm: 'source', health_check: null, backends: [{ ip: '127.0.0.1', port: 5432, weight: 1 }] },
      ]);
      const stats = await provider.stats(serviceId);
      expect(stats.listeners).toEqual([
        {
          name: 'db',
          state: 'up',
          currentConnections: expect.any(Number),
          bytesIn: expect.any(Number),
          bytesOut: expect.any(Number),
          backends: [{ ip: '127.0.0.1', port: 5432, health: 'unknown' }],
        },
      ]);
    });

    it('stops (listeners down, zero counters), keeps its set, and starts again', async () => {
      const { provider, serviceId, address } = await make();
      await provider.create(serviceId);
      const set = await provider.apply(serviceId, [httpListener('web', await freePort(address), [{ ip: '127.0.0.1', port: 8080 }])]);
      await provider.stop(serviceId);
      await provider.stop(serviceId);
      expect(await provider.status(serviceId)).toMatchObject({ state: 'stopped', healthy: false, listenerCount: 1 });
      expect((await provider.stats(serviceId)).listeners).toEqual([
        { name: 'web', state: 'down', currentConnections: 0, bytesIn: 0, bytesOut: 0, backends: [{ ip: '127.0.0.1', port: 8080, health: 'unknown' }] },
      ]);
      expect(await provider.start(serviceId)).toMatchObject({ state: 'running', listenerCount: 1 });
      expect(await provider.listeners(serviceId)).toEqual(set);
    });

    it('cuts every listener with [] and forgets a destroyed balancer', async () => {
      const { provider, serviceId, address } = await make();
      await provider.create(serviceId, [httpListener('web', await freePort(address), [{ ip: '127.0.0.1', port: 8080 }])]);
      expect((await provider.status(serviceId)).listenerCount).toBe(1);
      expect(await provider.apply(serviceId, [])).toEqual([]);
      expect(await provider.stats(serviceId)).toEqual({ listeners: [] });
      await provider.destroy(serviceId);
      await provider.destroy(serviceId);
      await expect(provider.status(serviceId)).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.apply(serviceId, [])).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.stats(serviceId)).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.start(serviceId)).rejects.toBeInstanceOf(BackendGoneError);
    });
  });
}
