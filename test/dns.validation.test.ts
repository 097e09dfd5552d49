import { describe, expect, it } from 'vitest';
import { DomainError } from '../domain/errors';
import { absoluteName, normalizeTarget, normalizeZoneName, parseZoneName, relativeName } from '../domain/dns/names';
import { assertCnameExclusive, parseRRsetChange, parseTtl, parseValues, withParamPrefix } from '../domain/dns/rrsets';
import { canonicalValue, txtStrings } from '../domain/dns/values';
import { formatZoneFile, parseZoneFile } from '../providers/dns.zone-file';
import { etagOf, ifMatchAllows } from '../domain/dns/etag';
import { fingerprintRRsets, type DnsRRset, type RRsetType } from '../providers/dns.provider';

/** The DNS family's pure rules: names, values per type, TTL, CNAME exclusivity (no server, no database). */
function failure(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error('expected a DomainError');
}

describe('zone names', () => {
  it('normalises case, the trailing dot and IDN', () => {
    expect(normalizeZoneName('Example.ORG.')).toBe('example.org');
    expect(normalizeZoneName('  example.org ')).toBe('example.org');
    expect(normalizeZoneName('Bücher.Example')).toBe('xn--bcher-kva.example');
    expect(normalizeZoneName('xn--bcher-kva.example')).toBe('xn--bcher-kva.example');
    expect(normalizeZoneName('sub.domain.example.co.uk')).toBe('sub.domain.example.co.uk');
  });

  it.each([
    '',
    'org',
    'org.',
    'exa mple.org',
    '-bad.org',
    'bad-.org',
    'a..b',
    'under_score.org',
    '*.example.org',
    '1.2.3.4',
    `${'a'.repeat(64)}.org`,
    `${'a.'.repeat(127)}org`,
  ])('refuses %j with 400 at the given param', (input) => {
    const err = failure(() => normalizeZoneName(input, 'options.zone'));
    expect(err).toMatchObject({ status: 400, code: 'validation_failed', param: 'options.zone' });
    expect(parseZoneName(input)).toBeNull();
  });
});

describe('record names', () => {
  const zone = 'example.org';
  it('reads @, relative and absolute names inside the zone', () => {
    expect(absoluteName('@', zone)).toBe(zone);
    expect(absoluteName('www', zone)).toBe('www.example.org');
    expect(absoluteName('WWW', zone)).toBe('www.example.org');
    expect(absoluteName('a.b', zone)).toBe('a.b.example.org');
    expect(absoluteName('_sip._tcp', zone)).toBe('_sip._tcp.example.org');
    expect(absoluteName('*', zone)).toBe('*.example.org');
    expect(absoluteName('*.dev', zone)).toBe('*.dev.example.org');
    expect(absoluteName('www.example.org', zone)).toBe('www.example.org');
    expect(absoluteName('www.Example.org.', zone)).toBe('www.example.org');
    expect(absoluteName('example.org.', zone)).toBe(zone);
    expect(absoluteName('example.org', zone)).toBe(zone);
    expect(absoluteName('bücher', zone)).toBe('xn--bcher-kva.example.org');
  });

  it('gives names relative to the zone, @ for the apex', () => {
    expect(relativeName('example.org', zone)).toBe('@');
    expect(relativeName('www.example.org', zone)).toBe('www');
    expect(relativeName('_sip._tcp.example.org', zone)).toBe('_sip._tcp');
  });

  it.each([
    ['www.example.com.', /outside the zone/],
    ['notexample.org.', /outside the zone/],
    ['a..b', /not a valid record name/],
    ['.www', /not a valid record name/],
    ['a.*', /not a valid record name/],
    ['w w', /not a valid record name/],
    ['a/b', /not a valid record name/],
    [`${'a'.repeat(64)}`, /not a valid record name/],
    [`${'abcdefgh.'.repeat(27)}x`, /too long/],
  ])('refuses %j', (input, why) => {
    const err = failure(() => absoluteName(input, zone));
    expect(err).toMatchObject({ status: 400, code: 'validation_failed', param: 'name' });
    expect(err.message).toMatch(why);
  });

  it('makes targets absolute with the trailing dot', () => {
    expect(normalizeTarget('Mail.Example.NET', 'v')).toBe('mail.example.net.');
    expect(normalizeTarget('mail.example.net.', 'v')).toBe('mail.example.net.');
    expect(normalizeTarget('.', 'v', true)).toBe('.');
    expect(() => normalizeTarget('.', 'v')).toThrow(DomainError);
    expect(() => normalizeTarget('bad host', 'v')).toThrow(DomainError);
  });
});

describe('values per type', () => {
  const ok: Array<[RRsetType, string, string]> = [
    ['A', '192.0.2.1', '192.0.2.1'],
    ['A', ' 198.51.100.255 ', '198.51.100.255'],
    ['AAAA', '2001:DB8:0:0::1', '2001:db8::1'],
    ['AAAA', '2001:0db8:0000:0000:0001:0000:0000:0001', '2001:db8::1:0:0:1'],
    ['AAAA', '0:0:0:0:0:0:0:1', '::1'],
    ['AAAA', 'fe80::', 'fe80::'],
    ['AAAA', '2001:db8:1:2:3:4:5:6', '2001:db8:1:2:3:4:5:6'],
    ['AAAA', '2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    ['CNAME', 'Target.Example.net', 'target.example.net.'],
    ['NS', 'ns1.example.net.', 'ns1.example.net.'],
    ['PTR', 'host.example.net', 'host.example.net.'],
    ['MX', '10 Mail.example.net', '10 mail.example.net.'],
    ['MX', '0  .', '0 .'],
    ['SRV', '10 5 5060 sip.example.net', '10 5 5060 sip.example.net.'],
    ['SRV', '0 0 0 .', '0 0 0 .'],
    ['TXT', 'v=spf1 -all', '"v=spf1 -all"'],
    ['TXT', '', '""'],
    ['TXT', 'say "hi" \\o/', '"say \\"hi\\" \\\\o/"'],
    ['TXT', 'é\t', '"\\195\\169\\009"'],
    ['TXT', '"a" "b"', '"a" "b"'],
    ['TXT', '"a\\"b" "\\195\\169"', '"a\\"b" "\\195\\169"'],
    ['TXT', '"\\065"', '"A"'],
    ['CAA', '0 issue "letsencrypt.org"', '0 issue "letsencrypt.org"'],
    ['CAA', '0 ISSUE letsencrypt.org', '0 issue "letsencrypt.org"'],
    ['CAA', '128 iodef "mailto:sec@example.org"', '128 iodef "mailto:sec@example.org"'],
    ['CAA', '0 iodef https://example.org/caa', '0 iodef "https://example.org/caa"'],
    ['CAA', '0 issuewild ";"', '0 issuewild ";"'],
  ];
  it.each(ok)('%s %j -> %j', (type, input, canonical) => {
    expect(canonicalValue(type, input, 'values.0')).toBe(canonical);
    // Canonical form is a fixed point.
    expect(canonicalValue(type, canonical, 'values.0')).toBe(canonical);
  });

  const bad: Array<[RRsetType, unknown, RegExp]> = [
    ['A', '192.0.2', /IPv4/],
    ['A', '192.0.2.256', /IPv4/],
    ['A', '010.0.0.1', /IPv4/],
    ['A', '2001:db8::1', /IPv4/],
    ['A', 42, /string/],
    ['A', '', /empty/],
    ['AAAA', '192.0.2.1', /IPv6/],
    ['AAAA', '2001:db8::g', /IPv6/],
    ['AAAA', 'fe80::1%eth0', /IPv6/],
    ['AAAA', '::ffff:192.0.2.1', /A record/],
    ['AAAA', '::ffff:c000:201', /A record/],
    ['AAAA', '::192.0.2.1', /A record/],
    ['CNAME', 'not a host', /host name/],
    ['CNAME', '.', /root/],
    ['MX', 'mail.example.net', /preference/],
    ['MX', '70000 mail.example.net', /preference/],
    ['MX', '-1 mail.example.net', /preference/],
    ['MX', '10 bad_host!', /host name/],
    ['SRV', '10 5 sip.example.net', /priority/],
    ['SRV', '10 5 65536 sip.example.net', /port/],
    ['TXT', '"unclosed', /not closed/],
    ['TXT', '"a" b', /quoted/],
    ['TXT', '"\\256"', /byte/],
    ['TXT', 'x'.repeat(65_001), /65000/],
    ['CAA', 'issue letsencrypt.org', /flags/],
    ['CAA', '256 issue "x.org"', /flags/],
    ['CAA', '0 is-sue "x.org"', /CAA tag/],
    ['CAA', '0 iodef "not-a-url"', /URL/],
    ['CAA', '0 issue "bad value!"', /CA's domain/],
    ['CAA', '0 issue "a" "b"', /one quoted string/],
  ];
  it.each(bad)('%s %j is refused', (type, input, why) => {
    const err = failure(() => canonicalValue(type, input, 'values.3'));
    expect(err).toMatchObject({ status: 400, code: 'validation_failed', param: 'values.3' });
    expect(err.message).toMatch(why);
  });

  it('splits long text into strings of at most 255 bytes, between UTF-8 characters', () => {
    const ascii = canonicalValue('TXT', 'k'.repeat(600), 'values.0');
    expect(ascii).toBe(`"${'k'.repeat(255)}" "${'k'.repeat(255)}" "${'k'.repeat(90)}"`);
    expect(txtStrings(ascii).join('')).toBe('k'.repeat(600));

    const text = 'a' + 'é'.repeat(200); // 401 bytes; byte 255 would fall inside an é
    const chunks = txtStrings(canonicalValue('TXT', text, 'values.0'));
    expect(chunks.join('')).toBe(text);
    expect(chunks.map((c) => Buffer.byteLength(c))).toEqual([255, 146]);

    // A quoted string longer than 255 bytes is split too.
    expect(canonicalValue('TXT', `"${'q'.repeat(256)}"`, 'values.0')).toBe(`"${'q'.repeat(255)}" "q"`);
  });
});

describe('RRset changes', () => {
  const zone = 'example.org';
  it('reads a full change with defaults', () => {
    expect(parseRRsetChange(zone, { name: 'WWW', type: 'a', values: ['192.0.2.2', '192.0.2.1'] }, { allowEmpty: false })).toEqual({
      fqdn: 'www.example.org',
      name: 'www',
      type: 'A',
      ttl: 3600,
      values: ['192.0.2.2', '192.0.2.1'],
    });
    expect(parseRRsetChange(zone, { name: '@', type: 'TXT', ttl: 60, values: [] }, { allowEmpty: true }).values).toEqual([]);
  });

  it('checks ttl 60..86400, default 3600', () => {
    expect(parseTtl(undefined)).toBe(3600);
    expect(parseTtl(60)).toBe(60);
    expect(parseTtl(86_400)).toBe(86_400);
    for (const bad of [59, 86_401, 300.5, '300', -1]) expect(failure(() => parseTtl(bad))).toMatchObject({ param: 'ttl', code: 'validation_failed' });
  });

  it('refuses unknown types, SOA, empty and duplicate values, and a second CNAME value', () => {
    expect(failure(() => parseRRsetChange(zone, { name: 'x', type: 'SOA', values: ['x'] }, { allowEmpty: false }))).toMatchObject({ param: 'type' });
    expect(failure(() => parseRRsetChange(zone, { name: 'x', type: 'HINFO', values: ['x'] }, { allowEmpty: false }))).toMatchObject({ param: 'type' });
    expect(failure(() => parseValues('A', [], { allowEmpty: false }))).toMatchObject({ param: 'values' });
    expect(failure(() => parseValues('A', 'nope', { allowEmpty: true }))).toMatchObject({ param: 'values' });
    expect(
      failure(() =>
        parseValues(
          'A',
          Array.from({ length: 101 }, (_, i) => `192.0.2.${i}`),
          { allowEmpty: false },
        ),
      ),
    ).toMatchObject({ param: 'values' });
    const dup = failure(() => parseValues('AAAA', ['2001:db8::1', '2001:DB8:0::1'], { allowEmpty: false }));
    expect(dup).toMatchObject({ param: 'values.1' });
    expect(dup.message).toMatch(/values\.0/);
    expect(failure(() => parseValues('CNAME', ['a.example.net', 'b.example.net'], { allowEmpty: false }))).toMatchObject({ param: 'values.1' });
    expect(failure(() => parseRRsetChange(zone, { name: 5, type: 'A', values: ['192.0.2.1'] }, { allowEmpty: false }))).toMatchObject({ param: 'name' });
  });

  it('keeps a CNAME alone at its name (409), and refuses one at the apex', () => {
    const existing: DnsRRset[] = [
      { name: 'example.org', type: 'NS', ttl: 3600, values: ['ns1.example.net.'] },
      { name: 'www.example.org', type: 'A', ttl: 300, values: ['192.0.2.1'] },
      { name: 'alias.example.org', type: 'CNAME', ttl: 300, values: ['x.example.net.'] },
    ];
    expect(failure(() => assertCnameExclusive(existing, zone, { fqdn: 'www.example.org', type: 'CNAME', values: ['y.example.net.'] }))).toMatchObject({
      status: 409,
      code: 'conflict',
    });
    expect(failure(() => assertCnameExclusive(existing, zone, { fqdn: 'alias.example.org', type: 'TXT', values: ['"x"'] }))).toMatchObject({
      status: 409,
      code: 'conflict',
    });
    // Replacing the CNAME itself, deleting beside it, and other names are fine.
    assertCnameExclusive(existing, zone, { fqdn: 'alias.example.org', type: 'CNAME', values: ['z.example.net.'] });
    assertCnameExclusive(existing, zone, { fqdn: 'alias.example.org', type: 'TXT', values: [] });
    assertCnameExclusive(existing, zone, { fqdn: 'www.example.org', type: 'AAAA', values: ['2001:db8::1'] });
    expect(failure(() => parseRRsetChange(zone, { name: '@', type: 'CNAME', values: ['x.example.net'] }, { allowEmpty: false }))).toMatchObject({
      status: 409,
    });
  });

  it('puts a PATCH element index in front of the param', () => {
    const err = withParamPrefix(
      failure(() => parseValues('A', ['192.0.2.1', 'x'], { allowEmpty: false })),
      'records.3',
    ) as DomainError;
    expect(err).toMatchObject({ status: 400, param: 'records.3.values.1', extra: { errors: [{ param: 'records.3.values.1' }] } });
    expect(err.message).toMatch(/^records\.3\.values\.1: /);
    expect(
      withParamPrefix(
        failure(() =>
          assertCnameExclusive([{ name: 'a.example.org', type: 'A', ttl: 60, values: ['192.0.2.1'] }], zone, {
            fqdn: 'a.example.org',
            type: 'CNAME',
            values: ['b.'],
          }),
        ),
        'records.0',
      ),
    ).toMatchObject({
      status: 409,
      param: 'records.0',
    });
  });
});

describe('zone files and fingerprints', () => {
  const rrsets: DnsRRset[] = [
    { name: 'example.org', type: 'SOA', ttl: 3600, values: ['ns1.example.net. hostmaster.example.net. 7 10800 3600 604800 3600'] },
    { name: 'example.org', type: 'NS', ttl: 3600, values: ['ns1.example.net.', 'ns2.example.net.'] },
    { name: 'www.example.org', type: 'TXT', ttl: 60, values: ['"a\\009b" "c"'] },
  ];
  it('writes PowerDNS export lines and reads them back', () => {
    const text = formatZoneFile(rrsets);
    expect(text.split('\n')[0]).toBe('example.org.\t3600\tIN\tNS\tns1.example.net.');
    expect(text).toContain('www.example.org.\t60\tIN\tTXT\t"a\\009b" "c"\n');
    expect(parseZoneFile(text).sort((a, b) => (a.name + a.type < b.name + b.type ? -1 : 1))).toEqual(
      [...rrsets].sort((a, b) => (a.name + a.type < b.name + b.type ? -1 : 1)),
    );
  });

  it('fingerprints content, not order', () => {
    const reordered = [rrsets[2], rrsets[0], { ...rrsets[1], values: [...rrsets[1].values].reverse() }];
    expect(fingerprintRRsets(reordered)).toBe(fingerprintRRsets(rrsets));
    expect(fingerprintRRsets([{ ...rrsets[0], ttl: 3601 }, rrsets[1], rrsets[2]])).not.toBe(fingerprintRRsets(rrsets));
  });
});

describe('ETag and If-Match', () => {
  it('quotes the fingerprint and compares If-Match strongly', () => {
    const etag = etagOf('abc');
    expect(etag).toBe('"abc"');
    expect(ifMatchAllows(undefined, etag)).toBe(true);
    expect(ifMatchAllows('"abc"', etag)).toBe(true);
    expect(ifMatchAllows(' "x", "abc" ', etag)).toBe(true);
    expect(ifMatchAllows('*', etag)).toBe(true);
    expect(ifMatchAllows('"abd"', etag)).toBe(false);
    expect(ifMatchAllows('W/"abc"', etag)).toBe(false);
    expect(ifMatchAllows('abc', etag)).toBe(false);
    expect(ifMatchAllows('', etag)).toBe(false);
  });
});
