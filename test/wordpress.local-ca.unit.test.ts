import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CERT_VALIDITY_DAYS, LocalCertificateAuthority } from '../providers/wordpress/local-ca';

/**
 * The hosted sites' local certificate authority (providers/wordpress/local-ca.ts): real X.509
 * certificates from Debian's openssl, checked with openssl itself.
 */
let work: string;
let ca: LocalCertificateAuthority;

const openssl = (...args: string[]) => execFileSync('openssl', args, { encoding: 'utf8' });

beforeAll(() => {
  work = mkdtempSync(path.join(tmpdir(), 'wp-local-ca-'));
  ca = new LocalCertificateAuthority(path.join(work, 'ca'));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('local certificate authority', () => {
  it('issues a certificate for two names that openssl verifies against the CA', async () => {
    const into = { dir: path.join(work, 'sites', 'svc-1', 'certs'), base: 'example-ca.test' };
    const before = Date.now();
    const issued = await ca.issue(['example-ca.test', 'www.example-ca.test'], into);
    expect(issued.certFile).toBe(path.join(into.dir, 'example-ca.test.crt'));
    expect(issued.keyFile).toBe(path.join(into.dir, 'example-ca.test.key'));

    const text = openssl('x509', '-in', issued.certFile, '-noout', '-text');
    expect(text).toMatch(/DNS:example-ca\.test, DNS:www\.example-ca\.test/);
    expect(text).toMatch(/Issuer: O = Cloud platform \(local\), CN = Cloud local certificate authority/);
    expect(text).toMatch(/Subject: CN = example-ca\.test/);
    expect(text).toMatch(/TLS Web Server Authentication/);
    expect(text).toMatch(/CA:FALSE/);
    const caText = openssl('x509', '-in', ca.certFile, '-noout', '-text');
    expect(caText).toMatch(/CA:TRUE/);
    expect(openssl('x509', '-in', ca.certFile, '-noout', '-subject').trim()).toBe(
      `subject=${openssl('x509', '-in', issued.certFile, '-noout', '-issuer').trim().slice('issuer='.length)}`,
    );

    // 90 days from now.
    const notAfter = new Date(openssl('x509', '-in', issued.certFile, '-noout', '-enddate').trim().slice('notAfter='.length));
    const notBefore = new Date(openssl('x509', '-in', issued.certFile, '-noout', '-startdate').trim().slice('notBefore='.length));
    expect(issued.notAfter).toBe(notAfter.toISOString());
    expect(notAfter.getTime() - notBefore.getTime()).toBe(CERT_VALIDITY_DAYS * 86_400_000);
    expect(Math.abs(notBefore.getTime() - before)).toBeLessThan(60_000);

    expect(openssl('verify', '-CAfile', ca.certFile, issued.certFile).trim()).toBe(`${issued.certFile}: OK`);
    // The key is the certificate's, and only its owner reads it (as are the CA's key and directories).
    const pub = (args: string[]) => openssl(...args).trim();
    expect(pub(['pkey', '-in', issued.keyFile, '-pubout'])).toBe(pub(['x509', '-in', issued.certFile, '-noout', '-pubkey']));
    expect(statSync(issued.keyFile).mode & 0o777).toBe(0o600);
    expect(statSync(into.dir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(work, 'ca', 'ca.key')).mode & 0o777).toBe(0o600);
    expect(statSync(path.join(work, 'ca')).mode & 0o777).toBe(0o700);
    if (process.getuid?.() === 0) expect(statSync(issued.keyFile).uid).toBe(0);
  });

  it('makes the CA once: a second issue (and a second instance) signs with the same CA', async () => {
    const caPem = readFileSync(ca.certFile, 'utf8');
    const again = new LocalCertificateAuthority(path.join(work, 'ca'));
    const issued = await again.issue(['shop.example-ca.test'], { dir: path.join(work, 'certs2'), base: 'shop.example-ca.test' });
    expect(readFileSync(ca.certFile, 'utf8')).toBe(caPem);
    expect(openssl('verify', '-CAfile', ca.certFile, issued.certFile).trim()).toBe(`${issued.certFile}: OK`);
    // A re-issue replaces the files with a new key and serial.
    const first = openssl('x509', '-in', issued.certFile, '-noout', '-serial');
    await again.issue(['shop.example-ca.test'], { dir: path.join(work, 'certs2'), base: 'shop.example-ca.test' });
    expect(openssl('x509', '-in', issued.certFile, '-noout', '-serial')).not.toBe(first);
    await again.remove({ dir: path.join(work, 'certs2'), base: 'shop.example-ca.test' });
    await again.remove({ dir: path.join(work, 'certs2'), base: 'shop.example-ca.test' });
    expect(() => statSync(issued.certFile)).toThrow();
    expect(() => statSync(issued.keyFile)).toThrow();
  });

  it('refuses names that are not host names before running anything', async () => {
    const into = { dir: path.join(work, 'bad'), base: 'bad.example-ca.test' };
    for (const names of [[], ['*.example.test'], ['a.test\nDNS.9 = evil.test'], ['UPPER.test'], ['localhost'], ['a.test, DNS:b.test']]) {
      await expect(ca.issue(names, into)).rejects.toThrow(/certificate/);
    }
    await expect(ca.issue(['ok.example-ca.test'], { dir: into.dir, base: '../escape' })).rejects.toThrow(/file name/);
    expect(() => statSync(into.dir)).toThrow();
  });
});
