import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { normalizeZoneName } from '../domain/dns/names';
import { canonicalValue } from '../domain/dns/values';
import { formatZoneFile, parseZoneFile } from '../providers/dns.zone-file';
import { fingerprintRRsets, type DnsProvider, type RRsetType } from '../providers/dns.provider';
import { BackendGoneError, BackendRefusedError } from '../providers/errors';
import { TEST_ZONE_DEFAULTS } from './helpers/powerdns';

/**
 * What every DNS provider does, the real PowerDNS adapter and the simulator alike
 * (test/dns.powerdns.test.ts and test/dns.simulator.test.ts run it against each).
 */
export function dnsProviderContract(getProvider: () => DnsProvider): void {
  const newZone = () => `z${randomBytes(4).toString('hex')}.example`;
  const canon = (type: RRsetType, values: string[]) => values.map((v, i) => canonicalValue(type, v, `values.${i}`)).sort();

  describe('zones', () => {
    it('creates a zone with the configured SOA and NS, idempotently', async () => {
      const provider = getProvider();
      const zone = newZone();
      const info = await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      expect(info).toMatchObject({ name: zone, kind: 'native', nameservers: TEST_ZONE_DEFAULTS.nameservers, recordCount: 3 });
      expect(info.serial).toBeGreaterThan(0);
      const again = await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      expect(again).toEqual(info);

      const rrsets = await provider.listRRsets(zone);
      expect(rrsets.map((r) => `${r.name} ${r.type}`)).toEqual([`${zone} NS`, `${zone} SOA`]);
      const soa = rrsets.find((r) => r.type === 'SOA')!;
      expect(soa.values[0]).toBe(
        `ns1.dns-test.example.net. hostmaster.dns-test.example.net. ${info.serial} ${TEST_ZONE_DEFAULTS.refresh} ${TEST_ZONE_DEFAULTS.retry} ${TEST_ZONE_DEFAULTS.expire} ${TEST_ZONE_DEFAULTS.minimum}`,
      );
      expect(soa.ttl).toBe(TEST_ZONE_DEFAULTS.ttl);
      expect(await provider.getRRset(zone, zone, 'SOA')).toEqual(soa);
      expect(await provider.getRRset(zone, `www.${zone}`, 'SOA')).toBeNull();
    });

    it('creates an IDN zone under its punycode name', async () => {
      const provider = getProvider();
      const zone = normalizeZoneName(`Bücher-${randomBytes(3).toString('hex')}.Example.`);
      expect(zone).toMatch(/^xn--bcher-.*\.example$/);
      expect((await provider.createZone(zone, TEST_ZONE_DEFAULTS)).name).toBe(zone);
      expect((await provider.zoneInfo(zone)).name).toBe(zone);
    });

    it('deletes a zone with its records; deleting it again is not an error; reads then say gone', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
      await provider.deleteZone(zone);
      await provider.deleteZone(zone);
      await expect(provider.zoneInfo(zone)).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.listRRsets(zone)).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.getRRset(zone, `www.${zone}`, 'A')).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.exportZone(zone)).rejects.toBeInstanceOf(BackendGoneError);
      await expect(provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] })).rejects.toBeInstanceOf(BackendGoneError);
      // Created again, it starts empty.
      expect((await provider.createZone(zone, TEST_ZONE_DEFAULTS)).recordCount).toBe(3);
    });
  });

  describe('RRsets', () => {
    it('replaces an RRset, raises the serial, and reads it back', async () => {
      const provider = getProvider();
      const zone = newZone();
      const before = await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.2', '192.0.2.1'] });
      expect(await provider.getRRset(zone, `www.${zone}`, 'A')).toEqual({ name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1', '192.0.2.2'] });
      const after = await provider.zoneInfo(zone);
      expect(after.serial).toBeGreaterThan(before.serial);
      expect(after.recordCount).toBe(5);

      // Replacing is not appending.
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 600, values: ['192.0.2.3'] });
      expect(await provider.getRRset(zone, `www.${zone}`, 'A')).toEqual({ name: `www.${zone}`, type: 'A', ttl: 600, values: ['192.0.2.3'] });
      expect((await provider.zoneInfo(zone)).serial).toBeGreaterThan(after.serial);
      expect(await provider.getRRset(zone, `www.${zone}`, 'AAAA')).toBeNull();
      expect(await provider.getRRset(zone, `nope.${zone}`, 'A')).toBeNull();
    });

    it('keeps every type in the canonical form it was written in', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      const longText = 'x'.repeat(300) + ' "quoted" back\\slash é\ttab';
      const cases: Array<[string, RRsetType, string[]]> = [
        ['@', 'A', ['192.0.2.10', '198.51.100.7']],
        ['v6', 'AAAA', ['2001:DB8:0:0::1', '2001:db8:0:0:1:0:0:1']],
        ['alias', 'CNAME', ['Target.Example.NET']],
        ['@', 'MX', ['10 mail.example.net', '0 .']],
        ['txt', 'TXT', ['v=spf1 -all', longText, '"a" "b"', '']],
        ['sub', 'NS', ['ns.other.example.net.']],
        ['_sip._tcp', 'SRV', ['10 5 5060 sip.example.net', '0 0 0 .']],
        ['@', 'CAA', ['0 issue "letsencrypt.org; validationmethods=dns-01"', '128 iodef mailto:security@example.net', '0 issuewild ";"']],
        ['7', 'PTR', ['host.example.net']],
        ['*.wild', 'A', ['192.0.2.99']],
      ];
      for (const [rel, type, values] of cases) {
        const name = rel === '@' ? zone : `${rel}.${zone}`;
        const wanted = canon(type, values);
        await provider.replaceRRset(zone, { name, type, ttl: 3600, values: wanted });
        expect(await provider.getRRset(zone, name, type), `${rel} ${type}`).toEqual({ name, type, ttl: 3600, values: wanted });
      }
      const txt = await provider.getRRset(zone, `txt.${zone}`, 'TXT');
      expect(txt!.values.find((v) => v.startsWith('"xxx'))).toMatch(/^"x{255}" "x{45} \\"quoted\\" back\\\\slash \\195\\169\\009tab"$/);
    });

    it('deletes an RRset (and deleting what is not there is fine)', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'TXT', ttl: 300, values: ['"keep"'] });
      const serial = (await provider.zoneInfo(zone)).serial;
      await provider.deleteRRset(zone, `www.${zone}`, 'A');
      expect(await provider.getRRset(zone, `www.${zone}`, 'A')).toBeNull();
      expect(await provider.getRRset(zone, `www.${zone}`, 'TXT')).not.toBeNull();
      expect((await provider.zoneInfo(zone)).serial).toBeGreaterThan(serial);
      await provider.deleteRRset(zone, `www.${zone}`, 'A');
      await provider.deleteRRset(zone, `never.${zone}`, 'MX');
    });

    it('refuses content that is not in presentation form, names out of the zone, and a CNAME beside other data', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      const refusal = async (p: Promise<unknown>) => {
        const err = await p.then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(BackendRefusedError);
        return err as BackendRefusedError;
      };
      expect((await refusal(provider.replaceRRset(zone, { name: `m.${zone}`, type: 'MX', ttl: 300, values: ['mail.example.net.'] }))).code).toBe(
        'invalid_content',
      );
      expect((await refusal(provider.replaceRRset(zone, { name: `m.${zone}`, type: 'MX', ttl: 300, values: ['10 mail.example.net'] }))).code).toBe(
        'invalid_content',
      );
      expect((await refusal(provider.replaceRRset(zone, { name: `t.${zone}`, type: 'TXT', ttl: 300, values: ['unquoted'] }))).code).toBe('invalid_content');
      expect((await refusal(provider.replaceRRset(zone, { name: `a.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1', '192.0.2.1'] }))).code).toBe(
        'invalid_content',
      );
      expect((await refusal(provider.replaceRRset(zone, { name: 'www.elsewhere.example', type: 'A', ttl: 300, values: ['192.0.2.1'] }))).code).toBe(
        'out_of_zone',
      );

      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
      const cname = await refusal(provider.replaceRRset(zone, { name: `www.${zone}`, type: 'CNAME', ttl: 300, values: ['other.example.net.'] }));
      expect(cname.code).toBe('conflict');
      await provider.replaceRRset(zone, { name: `alias.${zone}`, type: 'CNAME', ttl: 300, values: ['other.example.net.'] });
      expect((await refusal(provider.replaceRRset(zone, { name: `alias.${zone}`, type: 'TXT', ttl: 300, values: ['"x"'] }))).code).toBe('conflict');
      expect((await refusal(provider.replaceRRset(zone, { name: zone, type: 'CNAME', ttl: 300, values: ['other.example.net.'] }))).code).toBe('conflict');
      // Nothing refused was written.
      expect(await provider.getRRset(zone, `m.${zone}`, 'MX')).toBeNull();
      expect(await provider.getRRset(zone, `www.${zone}`, 'CNAME')).toBeNull();
      expect(await provider.getRRset(zone, `alias.${zone}`, 'TXT')).toBeNull();
    });
  });

  describe('export and fingerprint', () => {
    it('exports a zone file that reads back as the same RRsets', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1', '192.0.2.2'] });
      await provider.replaceRRset(zone, { name: zone, type: 'MX', ttl: 3600, values: ['10 mail.example.net.'] });
      await provider.replaceRRset(zone, { name: `t.${zone}`, type: 'TXT', ttl: 60, values: canon('TXT', ['hello "world"', 'é'.repeat(200)]) });
      const text = await provider.exportZone(zone);
      expect(text).toContain(`www.${zone}.\t300\tIN\tA\t192.0.2.1\n`);
      const parsed = parseZoneFile(text);
      expect(parsed.map((r) => `${r.name}/${r.type}`).sort()).toEqual((await provider.listRRsets(zone)).map((r) => `${r.name}/${r.type}`).sort());
      for (const rrset of await provider.listRRsets(zone)) {
        expect(parsed.find((p) => p.name === rrset.name && p.type === rrset.type)).toEqual(rrset);
      }
      // Written out again in the same form, it is the same file.
      expect(formatZoneFile(parsed)).toBe(text);
    });

    it('has a fingerprint of the RRsets that changes with every change and only then', async () => {
      const provider = getProvider();
      const zone = newZone();
      await provider.createZone(zone, TEST_ZONE_DEFAULTS);
      const first = await provider.fingerprint(zone);
      expect(first).toBe(fingerprintRRsets(await provider.listRRsets(zone)));
      expect(await provider.fingerprint(zone)).toBe(first);
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
      const second = await provider.fingerprint(zone);
      expect(second).not.toBe(first);
      // The same content written again is still a change: the serial moved.
      await provider.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
      expect(await provider.fingerprint(zone)).not.toBe(second);
      await expect(provider.fingerprint(newZone())).rejects.toBeInstanceOf(BackendGoneError);
    });
  });
}
