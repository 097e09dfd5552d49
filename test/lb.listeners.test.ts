import { describe, expect, it } from 'vitest';
import { canonicalIp, listenerErrors, normalizeListeners, requireValidListeners } from '../domain/lb/listeners';
import { balancerAddress, type LbListener } from '../providers/lb.provider';
import { DomainError } from '../domain/errors';

/** The pure listener rules and address allocation (the providers' shared behaviour is in lb.contract.ts). */
const web: LbListener = {
  name: 'web',
  protocol: 'http',
  port: 80,
  algorithm: 'roundrobin',
  health_check: { path: '/healthz', interval_seconds: 5 },
  backends: [{ ip: '10.0.0.1', port: 8080, weight: 1 }],
};

describe('listener rules', () => {
  it('accepts a valid set and reports every problem of an invalid one, in dot notation', () => {
    expect(listenerErrors([web, { ...web, name: 'api', port: 443, protocol: 'tcp', health_check: { interval_seconds: 2 } }])).toEqual([]);
    expect(
      listenerErrors([
        { ...web, name: 'a_b', algorithm: 'random' as never, protocol: 'udp' as never },
        {
          ...web,
          port: 80,
          backends: [
            { ip: 'fe80::1%eth0', port: 80, weight: -1 },
            { ip: '224.0.0.1', port: 1.5, weight: 1 },
          ],
        },
      ]).map((e) => e.param),
    ).toEqual([
      'listeners.0.name',
      'listeners.0.protocol',
      'listeners.0.algorithm',
      'listeners.1.port',
      'listeners.1.backends.0.ip',
      'listeners.1.backends.0.weight',
      'listeners.1.backends.1.ip',
      'listeners.1.backends.1.port',
    ]);
    expect(listenerErrors(Array.from({ length: 51 }, (_, i) => ({ ...web, name: `l${i}`, port: 1000 + i })))).toEqual([
      { param: 'listeners', message: 'at most 50 listeners per load balancer' },
    ]);
  });

  it('throws 400 validation_failed with the first param, and stores IPv6 short and the default check path', () => {
    const err = (() => {
      try {
        requireValidListeners([{ ...web, backends: [] }]);
      } catch (e) {
        return e;
      }
    })() as DomainError;
    expect(err).toBeInstanceOf(DomainError);
    expect({ status: err.status, code: err.code, param: err.param }).toEqual({ status: 400, code: 'validation_failed', param: 'listeners.0.backends' });
    expect(canonicalIp('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(normalizeListeners([{ ...web, health_check: { interval_seconds: 3 }, backends: [{ ip: '0:0::1', port: 1, weight: 0 }] }])[0]).toMatchObject({
      health_check: { path: '/', interval_seconds: 3 },
      backends: [{ ip: '::1', port: 1, weight: 0 }],
    });
  });
});

describe('balancer addresses (LB_BIND_ADDRESS)', () => {
  it('shares a single address, or gives each service its own host address of a range', () => {
    expect(balancerAddress('127.0.0.1', 12)).toBe('127.0.0.1');
    expect(balancerAddress('127.77.0.0/16', 1)).toBe('127.77.0.2');
    expect(balancerAddress('127.77.0.0/16', 300)).toBe('127.77.1.45');
    // Never the network or the broadcast address, whatever the id.
    const addresses = Array.from({ length: 600 }, (_, i) => balancerAddress('10.1.2.0/24', i));
    expect(addresses).not.toContain('10.1.2.0');
    expect(addresses).not.toContain('10.1.2.255');
    expect(() => balancerAddress('localhost', 1)).toThrow(/LB_BIND_ADDRESS/);
    expect(() => balancerAddress('10.0.0.0/4', 1)).toThrow(/prefix/);
  });
});
