import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../common/logger';
import { protectLocalPorts } from '../common/platform-ports';
import { BalancerKeeper } from '../domain/lb/keeper';
import { LbProvisioner } from '../domain/lb/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { backendTargetProblem, type BackendTargetPolicy } from '../providers/lb.rules';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { freePort } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * Where load-balancer backends may point (issue 22, docs/lb.md "Backend addresses"): never at this
 * machine's link (cloud metadata), the platform's own servers or its balancers, in any spelling of
 * the address; loopback only with ALLOW_INSECURE_TARGETS. Refused at write time (400 with the
 * field) and left out of the HAProxy configuration when a stored backend becomes refused later.
 * Real HAProxy, real PostgreSQL, a real database instance.
 */

const listener = (name: string, port: number, backends: Array<{ ip: string; port: number }>) => ({
  name,
  protocol: 'http',
  port,
  health_check: { path: '/', interval_seconds: 1 },
  backends,
});

async function buildBalancer(stack: Stack, label: string): Promise<{ lbId: string; serviceId: number; address: string }> {
  const { serviceId, id: lbId } = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label });
  const target = (await provisionTargetOf(stack.db, serviceId))!;
  await new LbProvisioner(stack.db, stack.api.deps.providers.lb, stack.api.deps.providers.hosts).provision(target);
  const address = (await stack.db('lb_balancers').where({ service_id: serviceId }).first()).address;
  return { lbId, serviceId, address };
}

describe('backend target rules (pure)', () => {
  const policy: BackendTargetPolicy = {
    allowLoopback: true,
    protectedPorts: new Set([7233, 3000]),
    hostAddresses: new Set(['172.17.0.2']),
    platformRanges: [
      { range: '127.77.0.0/16', what: "the platform's load balancers" },
      { range: '127.78.0.0/16', what: "the platform's database instances" },
    ],
  };
  const strict = { ...policy, allowLoopback: false };

  it.each([
    ['169.254.169.254', 80, 'ip', /link-local/],
    ['::ffff:169.254.169.254', 80, 'ip', /link-local/],
    ['::ffff:a9fe:a9fe', 80, 'ip', /link-local/],
    ['0:0:0:0:0:ffff:a9fe:a9fe', 80, 'ip', /link-local/],
    ['64:ff9b::a9fe:a9fe', 80, 'ip', /link-local/],
    ['fe80::1', 80, 'ip', /link-local/],
    ['::ffff:0.0.0.0', 80, 'ip', /not the address of a host/],
    ['::ffff:224.0.0.1', 80, 'ip', /not the address of a host/],
    ['::127.0.0.1', 80, 'ip', /IPv4-compatible/],
    ['127.0.0.1', 7233, 'port', /platform's own servers/],
    ['::ffff:127.0.0.1', 7233, 'port', /platform's own servers/],
    ['::ffff:7f00:1', 3000, 'port', /platform's own servers/],
    ['0:0:0:0:0:FFFF:7F00:0001', 3000, 'port', /platform's own servers/],
    ['127.8.9.10', 7233, 'port', /platform's own servers/],
    ['172.17.0.2', 7233, 'port', /platform's own servers/],
    ['127.77.0.8', 8080, 'ip', /load balancers/],
    ['::ffff:127.77.0.8', 8080, 'ip', /load balancers/],
    ['127.78.0.1', 5432, 'ip', /database instances/],
    // NAT64 and 6to4 forms reach the IPv4 address they carry through a gateway.
    ['64:ff9b::127.77.0.8', 8080, 'ip', /load balancers/],
    ['64:ff9b::7f4e:1', 5432, 'ip', /database instances/],
    ['2002:7f4d:8::1', 8080, 'ip', /load balancers/],
    ['64:ff9b::172.17.0.2', 7233, 'port', /platform's own servers/],
  ])('%s port %d is refused (%s)', (ip, port, field, message) => {
    const problem = backendTargetProblem(ip, port, policy);
    expect(problem?.field).toBe(field);
    expect(problem?.message).toMatch(message);
  });

  it.each([
    ['127.0.0.1', 8080],
    ['::1', 8080],
    ['::ffff:127.0.0.1', 8080],
    ['10.0.0.11', 7233], // a customer's private server may use any port
    ['192.168.1.5', 3000],
    ['fd00::5', 80],
    ['100.64.0.9', 80],
    ['2001:db8::1', 8080],
    ['203.0.113.7', 443],
    ['8.8.8.8', 53],
  ])('%s port %d is allowed (with the flag)', (ip, port) => {
    expect(backendTargetProblem(ip, port, policy)).toBeNull();
  });

  it.each(['127.0.0.1', '::1', '::ffff:127.0.0.1', '127.1.2.3', '172.17.0.2'])('%s is refused without the flag', (ip) => {
    expect(backendTargetProblem(ip, 8080, strict)).toMatchObject({ field: 'ip' });
  });
});

describe('load-balancer backends on real HAProxy, with ALLOW_INSECURE_TARGETS', () => {
  let stack: Stack;
  let token: string;
  let lb: { lbId: string; serviceId: number; address: string };
  let other: { lbId: string; serviceId: number; address: string };
  let port: number;
  let otherPort: number;
  let one: Backend;
  let two: Backend;
  let dbPort: number;
  const logLines: string[] = [];
  const path = () => `/v1/load-balancers/${lb.lbId}`;
  const put = (backends: Array<{ ip: string; port: number }>) =>
    stack.http.put(`${path()}/listeners`, { token, body: { listeners: [listener('web', port, backends)] } });

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none', env: { LB_BACKEND: 'haproxy', DBAAS_BACKEND: 'instances', ALLOW_INSECURE_TARGETS: '1' } });
    token = stack.owner.key;
    lb = await buildBalancer(stack, 'lb-targets');
    other = await buildBalancer(stack, 'lb-other-tenant');
    port = await freePort(lb.address);
    otherPort = await freePort(other.address);
    [one, two] = [await startBackend('one'), await startBackend('two')];
    // A real database instance of this stack: its port is the platform's from the moment it has one.
    const instance = await stack.api.deps.providers.dbaas.createInstance({
      name: `svc-${other.serviceId + 1000}-lbtest`,
      serviceId: other.serviceId + 1000,
      engine: 'postgresql',
      adminUsername: 'admin',
      adminPassword: 'Lb-targets-admin-passw0rd',
    });
    dbPort = instance.port;
  }, 120_000);
  afterAll(async () => {
    await Promise.all([one, two].map((b) => b?.stop()));
    await stack?.close();
  });

  it('refuses a backend on a port of the platform: Temporal, the API, PowerDNS, PostgreSQL, a database instance', async () => {
    const apiPort = Number(new URL(stack.url).port);
    const { TEMPORAL_ADDRESS, TEMPORAL_UI_URL, POWERDNS_API_URL, DNS_SERVER_ADDRESS, DATABASE_URL } = stack.config;
    const temporalPort = Number(TEMPORAL_ADDRESS.split(':').pop());
    const cases: Array<[string, number]> = [
      ['127.0.0.1', temporalPort], // Temporal's frontend (7233)
      ['127.0.0.1', apiPort], // this API
      ['127.0.0.1', Number(new URL(TEMPORAL_UI_URL).port)], // the Temporal UI (8233)
      ['127.0.0.1', Number(new URL(POWERDNS_API_URL).port)], // PowerDNS's HTTP API (5381)
      ['127.0.0.1', Number(DNS_SERVER_ADDRESS.split(':').pop())], // PowerDNS's DNS port (5300)
      ['127.0.0.1', Number(new URL(DATABASE_URL).port || 5432)], // the control plane's PostgreSQL
      ['127.0.0.1', dbPort], // another tenant's database instance
      ['::ffff:127.0.0.1', apiPort],
      ['::ffff:7f00:1', temporalPort],
      ['0:0:0:0:0:ffff:7f00:1', dbPort],
      ['127.0.0.2', apiPort], // all of 127/8 is this machine
    ];
    for (const [ip, backendPort] of cases) {
      const res = await put([
        { ip: '127.0.0.1', port: one.port },
        { ip, port: backendPort },
      ]);
      expect(res.status, `${ip} port ${backendPort}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'listeners.0.backends.1.port' });
      expect(res.body.error.message).toMatch(/belongs to the platform's own servers/);
    }
    expect((await stack.http.get(`${path()}/listeners`, { token })).body.data).toEqual([]);
  });

  it('refuses link-local (cloud metadata) addresses in every spelling, unspecified and multicast ones', async () => {
    for (const ip of ['169.254.169.254', '::ffff:169.254.169.254', '::ffff:a9fe:a9fe', '64:ff9b::a9fe:a9fe', 'fe80::1', '::ffff:0.0.0.0', '::127.0.0.1']) {
      const res = await put([{ ip, port: 80 }]);
      expect(res.status, `${ip}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'listeners.0.backends.0.ip' });
    }
  });

  it("refuses another balancer's listener, also through an IPv4-mapped address", async () => {
    for (const ip of [other.address, `::ffff:${other.address}`]) {
      const res = await put([{ ip, port: otherPort }]);
      expect(res.status, `${ip}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ param: 'listeners.0.backends.0.ip', message: expect.stringMatching(/load balancers/) });
    }
  });

  it('POST backends names the body field of a refused backend', async () => {
    expect((await put([{ ip: '127.0.0.1', port: one.port }])).status).toBe(200);
    const add = (ip: string, backendPort: number) => stack.http.post(`${path()}/backends`, { token, body: { listener: 'web', ip, port: backendPort } });
    const cases: Array<[string, number, string]> = [
      ['127.0.0.1', Number(new URL(stack.url).port), 'port'],
      ['::ffff:127.0.0.1', dbPort, 'port'],
      ['169.254.169.254', 80, 'ip'],
      ['::ffff:169.254.169.254', 80, 'ip'],
      [other.address, otherPort, 'ip'],
    ];
    for (const [ip, backendPort, param] of cases) {
      const res = await add(ip, backendPort);
      expect(res.status, `${ip} port ${backendPort}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
    }
    expect((await stack.http.get(`${path()}/backends`, { token })).body.data).toEqual([
      { object: 'lb_backend', listener: 'web', ip: '127.0.0.1', port: one.port, weight: 1 },
    ]);
  });

  it("an ordinary loopback backend works end to end; one whose port becomes the platform's is left out at the next pass", async () => {
    const res = await put([
      { ip: '127.0.0.1', port: one.port },
      { ip: '::ffff:127.0.0.1', port: two.port },
    ]);
    expect(res.status, res.text).toBe(200);
    const four = async () => (await Promise.all([1, 2, 3, 4].map(() => get(lb.address, port)))).sort();
    expect(await four()).toEqual(['one', 'one', 'two', 'two']);

    // `two`'s port becomes one of the platform's (as a new database instance's would): the keeper's
    // pass renders the stored set again without it, says so in the log, and stats show it down.
    protectLocalPorts([two.port]);
    const logger = createLogger('warn', 'test', { write: (line: string) => void logLines.push(line) });
    const deps = { db: stack.db, lb: stack.api.deps.providers.lb, logger, intervalMs: 60_000, targets: stack.api.deps.providers.lbTargets };
    const keeper = new BalancerKeeper(deps);
    await keeper.pass();
    expect(await four()).toEqual(['one', 'one', 'one', 'one']);
    const stats = await eventually(
      () => stack.http.get(`${path()}/stats`, { token }),
      (r) => r.body.listeners?.[0]?.backends?.[0]?.health === 'up',
    );
    expect(stats.body.listeners[0].backends).toEqual([
      { ip: '127.0.0.1', port: one.port, health: 'up' },
      { ip: '::ffff:7f00:1', port: two.port, health: 'down' },
    ]);
    const warning = logLines.map((l) => JSON.parse(l)).find((l) => /left out/.test(l.msg));
    expect(warning).toMatchObject({ service: `svc_${lb.serviceId}`, refused: [{ listener: 'web', backend: `::ffff:7f00:1:${two.port}` }] });
    // Said once, not at every pass.
    await keeper.pass();
    expect(logLines.filter((l) => /left out/.test(l))).toHaveLength(1);

    // The stored set is the customer's; the refused backend can still be removed.
    expect((await stack.http.get(`${path()}/listeners`, { token })).body.data[0].backends).toHaveLength(2);
    const removed = await stack.http.delete(`${path()}/backends/web/${encodeURIComponent('::ffff:7f00:1')}/${two.port}`, { token });
    expect(removed.status, removed.text).toBe(204);
    expect(await four()).toEqual(['one', 'one', 'one', 'one']);
  });

  it('a PUT that sends back a backend refused since it was stored is refused', async () => {
    const three = await startBackend('three');
    try {
      expect(
        (
          await put([
            { ip: '127.0.0.1', port: one.port },
            { ip: '127.0.0.1', port: three.port },
          ])
        ).status,
      ).toBe(200);
      protectLocalPorts([three.port]);
      // The set is sent again with one more listener: the backend on the now-protected port is refused.
      const more = await stack.http.put(`${path()}/listeners`, {
        token,
        body: {
          listeners: [
            listener('web', port, [
              { ip: '127.0.0.1', port: one.port },
              { ip: '127.0.0.1', port: three.port },
            ]),
            listener('web2', await freePort(lb.address), [{ ip: '127.0.0.1', port: one.port }]),
          ],
        },
      });
      expect(more.status).toBe(400);
      expect(more.body.error).toMatchObject({ param: 'listeners.0.backends.1.port' });
    } finally {
      await three.stop();
    }
  });
});

describe('load-balancer backends without ALLOW_INSECURE_TARGETS', () => {
  let stack: Stack;
  let lb: { lbId: string; serviceId: number; address: string };
  let backend: Backend;

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none', env: { LB_BACKEND: 'haproxy', DBAAS_BACKEND: 'instances', ALLOW_INSECURE_TARGETS: '0' } });
    lb = await buildBalancer(stack, 'lb-strict');
    backend = await startBackend('local');
  });
  afterAll(async () => {
    await backend?.stop();
    await stack?.close();
  });

  it("refuses loopback in any spelling, and this host's own addresses; private networks stay allowed", async () => {
    const port = await freePort(lb.address);
    const put = (ip: string) =>
      stack.http.put(`/v1/load-balancers/${lb.lbId}/listeners`, {
        token: stack.owner.key,
        body: { listeners: [listener('web', port, [{ ip, port: backend.port }])] },
      });
    // This machine's own addresses reach its servers as loopback does.
    const own = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && !a.internal && a.family === 'IPv4')
      .map((a) => a!.address);
    for (const ip of ['127.0.0.1', '::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '127.0.0.2', ...own]) {
      const res = await put(ip);
      expect(res.status, `${ip}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'listeners.0.backends.0.ip' });
    }
    const add = await stack.http.post(`/v1/load-balancers/${lb.lbId}/backends`, {
      token: stack.owner.key,
      body: { listener: 'web', ip: '127.0.0.1', port: backend.port },
    });
    expect(add.status).toBe(400);
    // A customer's servers on a private network are what a balancer is for.
    const ok = await put('10.0.0.11');
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.data[0].backends).toEqual([{ ip: '10.0.0.11', port: backend.port, weight: 1 }]);
  });
});
