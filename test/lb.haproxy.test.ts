import net from 'node:net';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { explainCheckFailure, renderConfig } from '../providers/haproxy/haproxy.config';
import { checkConfig, cliCommand, defaultHaproxyBinary, parseShowProc } from '../providers/haproxy/haproxy.process';
import { BackendRefusedError } from '../providers/errors';
import { balancerAddress, type LbListener } from '../providers/lb.provider';
import { describeLbContract, freePort, httpListener, testBindRange, type LbContractSubject } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * The HAProxy adapter against real HAProxy processes (Debian's 2.6, master-worker), with loopback
 * HTTP servers as backends, each balancer on a 127.x address of this file's own range.
 */
let dataDir: string;
let nextServiceId = 1;
const created: LbContractSubject['created'] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'lb-test-'));
});
afterAll(async () => {
  for (const { provider, serviceId } of created) await provider.destroy(serviceId).catch(() => undefined);
  await rm(dataDir, { recursive: true, force: true });
});

const makeProvider = (bindAddress: string) => new HaproxyLbProvider({ dataDir, bindAddress });

describeLbContract('haproxy', () => ({
  provider: makeProvider,
  newServiceId: async () => nextServiceId++,
  created,
}));

describe('haproxy: traffic', () => {
  const range = testBindRange();
  let lb: HaproxyLbProvider;
  let serviceId: number;
  let address: string;
  let port: number;
  let one: Backend;
  let two: Backend;
  let set: LbListener[];

  beforeAll(async () => {
    lb = makeProvider(range);
    serviceId = nextServiceId++;
    created.push({ provider: lb, serviceId });
    address = balancerAddress(range, serviceId);
    [one, two] = [await startBackend('one'), await startBackend('two')];
    port = await freePort(address);
    set = [
      httpListener(
        'web',
        port,
        [
          { ip: '127.0.0.1', port: one.port },
          { ip: '127.0.0.1', port: two.port },
        ],
        {
          health_check: { path: '/healthz', interval_seconds: 1 },
        },
      ),
    ];
    await lb.create(serviceId, set);
  });
  afterAll(async () => {
    await one?.stop();
    await two?.stop();
  });

  it('sends requests through a listener to its two backends in turn (roundrobin)', async () => {
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) answers.push(await get(address, port));
    expect(new Set(answers)).toEqual(new Set(['one', 'two']));
    for (let i = 1; i < answers.length; i++) expect(answers[i]).not.toBe(answers[i - 1]);
    const stats = await eventually(
      () => lb.stats(serviceId),
      (s) => s.listeners[0].backends.every((b) => b.health === 'up'),
    );
    expect(stats.listeners[0]).toMatchObject({ name: 'web', state: 'up', backends: [{ health: 'up' }, { health: 'up' }] });
    expect(stats.listeners[0].bytesIn).toBeGreaterThan(0);
    expect(stats.listeners[0].bytesOut).toBeGreaterThan(0);
  });

  it('refuses an invalid set before anything is applied: same file, no reload, traffic unchanged', async () => {
    const master = path.join(dataDir, `svc-${serviceId}`, 'master.sock');
    const configFile = path.join(dataDir, `svc-${serviceId}`, 'haproxy.cfg');
    const configBefore = await readFile(configFile, 'utf8');
    const reloadsBefore = parseShowProc(await cliCommand(master, 'show proc'))!.reloads;
    // A port some other process holds on the balancer's address: only binding it would tell.
    const squatter = net.createServer();
    const taken = await freePort(address);
    await new Promise<void>((resolve) => squatter.listen(taken, address, resolve));
    try {
      const invalid: Array<[LbListener[], string]> = [
        [[set[0], httpListener('api', taken, [{ ip: '127.0.0.1', port: one.port }])], 'listeners.1.port'],
        [[set[0], httpListener('api', port, [{ ip: '127.0.0.1', port: one.port }])], 'listeners.1.port'],
        [[{ ...set[0], backends: [] }], 'listeners.0.backends'],
        [[{ ...set[0], backends: [{ ip: '127.0.0.256', port: one.port, weight: 1 }] }], 'listeners.0.backends.0.ip'],
      ];
      for (const [listeners, param] of invalid) {
        const err = await lb.apply(serviceId, listeners).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(BackendRefusedError);
        expect((err as BackendRefusedError).param).toBe(param);
        expect(await get(address, port)).toMatch(/^(one|two)$/);
      }
    } finally {
      squatter.close();
    }
    expect(await readFile(configFile, 'utf8')).toBe(configBefore);
    expect(parseShowProc(await cliCommand(master, 'show proc'))!.reloads).toBe(reloadsBefore);
    expect(await lb.listeners(serviceId)).toEqual(set.map((l) => ({ ...l, health_check: { path: '/healthz', interval_seconds: 1 } })));
    const answers = [await get(address, port), await get(address, port)];
    expect(answers.sort()).toEqual(['one', 'two']);
  });

  it('reloads under a steady stream of requests without dropping one', async () => {
    let done = false;
    let ok = 0;
    const failures: string[] = [];
    const MAX_REQUESTS = 2_000;
    const client = async () => {
      while (!done && ok + failures.length < MAX_REQUESTS) {
        try {
          await get(address, port);
          ok++;
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
    };
    const clients = Array.from({ length: 4 }, client);
    const reloads: number[] = [];
    const okAtStart = await eventually(
      async () => ok,
      (n) => n >= 20,
    );
    for (let i = 0; i < 6; i++) {
      const before = ok;
      const started = Date.now();
      await lb.apply(serviceId, [
        { ...set[0], algorithm: i % 2 === 0 ? 'leastconn' : 'roundrobin', backends: set[0].backends.map((b, j) => ({ ...b, weight: 1 + ((i + j) % 3) })) },
      ]);
      reloads.push(Date.now() - started);
      // Traffic kept flowing across this reload.
      await eventually(
        async () => ok,
        (n) => n > before + 5,
      );
    }
    done = true;
    await Promise.all(clients);
    expect(okAtStart).toBeGreaterThan(0);
    expect(failures).toEqual([]);
    expect(ok).toBeGreaterThan(50);
    expect(ok).toBeLessThanOrEqual(MAX_REQUESTS);
    expect(reloads.every((ms) => ms < 5_000)).toBe(true);
    await lb.apply(serviceId, set);
  });

  it('takes a backend that stops answering out of rotation and shows it down', async () => {
    await two.stop();
    const stats = await eventually(
      () => lb.stats(serviceId),
      (s) => s.listeners[0].backends[1].health === 'down',
    );
    expect(stats.listeners[0]).toMatchObject({
      state: 'up',
      backends: [
        { port: one.port, health: 'up' },
        { port: two.port, health: 'down' },
      ],
    });
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) answers.push(await get(address, port));
    expect(answers).toEqual(Array(6).fill('one'));
    expect((await lb.status(serviceId)).healthy).toBe(true);
    two = await startBackend('two', two.port);
    await eventually(
      () => lb.stats(serviceId),
      (s) => s.listeners[0].backends[1].health === 'up',
    );
  });

  it('counts bytes since the balancer started, across reloads', async () => {
    const before = (await lb.stats(serviceId)).listeners[0];
    await get(address, port);
    await lb.apply(serviceId, [{ ...set[0], algorithm: 'leastconn' }]);
    const after = (await lb.stats(serviceId)).listeners[0];
    expect(after.bytesIn).toBeGreaterThan(before.bytesIn);
    expect(after.bytesOut).toBeGreaterThan(before.bytesOut);
    await lb.apply(serviceId, set);
  });

  it('is found again by a new process and keeps serving; [] cuts the traffic', async () => {
    const again = makeProvider(range);
    expect(await again.status(serviceId)).toMatchObject({ state: 'running', address, listenerCount: 1 });
    expect(await get(address, port)).toMatch(/^(one|two)$/);
    await again.apply(serviceId, []);
    await expect(get(address, port, 1_000)).rejects.toThrow(/ECONNREFUSED/);
    expect(await again.stats(serviceId)).toEqual({ listeners: [] });
    await again.apply(serviceId, set);
    expect(await get(address, port)).toMatch(/^(one|two)$/);
  });

  it('stops serving when stopped and serves the same set when started again', async () => {
    await lb.stop(serviceId);
    await expect(get(address, port, 1_000)).rejects.toThrow(/ECONNREFUSED/);
    await lb.start(serviceId);
    expect(await get(address, port)).toMatch(/^(one|two)$/);
  });
});

describe('haproxy: addresses and checks', () => {
  it('gives each balancer of a range its own address, so two can use the same port', async () => {
    const range = testBindRange();
    const lb = makeProvider(range);
    const [a, b] = [nextServiceId++, nextServiceId++];
    created.push({ provider: lb, serviceId: a }, { provider: lb, serviceId: b });
    const backend = await startBackend('shared');
    try {
      const port = await freePort(balancerAddress(range, a));
      const listener = [httpListener('web', port, [{ ip: '127.0.0.1', port: backend.port }])];
      const [first, second] = [await lb.create(a, listener), await lb.create(b, listener)];
      expect(first.address).not.toBe(second.address);
      expect(await get(first.address, port)).toBe('shared');
      expect(await get(second.address, port)).toBe('shared');
    } finally {
      await backend.stop();
    }
  });

  it('maps a line `haproxy -c` rejects to the listener field it was rendered from', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'lb-check-'));
    try {
      // Past the listener rules nothing like this reaches HAProxy; rendered by hand to see HAProxy's own check.
      const set = [
        httpListener('web', 8080, [
          { ip: '127.0.0.1', port: 80 },
          { ip: 'no-such-host.invalid', port: 80 },
        ]),
      ];
      const rendered = renderConfig(set, { address: '127.0.0.1', statsSocket: path.join(dir, 'stats.sock'), serviceId: 1 });
      const file = path.join(dir, 'haproxy.cfg');
      await import('node:fs/promises').then((fs) => fs.writeFile(file, rendered.text));
      const result = await checkConfig(defaultHaproxyBinary(), file);
      expect(result.ok).toBe(false);
      const failure = explainCheckFailure(result.output, rendered);
      expect(failure.param).toBe('listeners.0.backends.1.ip');
      expect(failure.message).not.toContain(dir);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
