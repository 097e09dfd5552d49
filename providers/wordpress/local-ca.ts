import { randomBytes, X509Certificate } from 'node:crypto';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { findBinary, LocalServerError, makeDirectory, run, withFileLock } from '../local-server';
import { SERVER_NAME } from './nginx';

/**
 * The hosted sites' certificate authority (the local stand-in for an ACME CA such as Let's Encrypt,
 * docs/wordpress.md): a CA of the host's own under `<dataDir>/ca/` (`ca.key`, 0600, and a
 * self-signed `ca.crt`, made once under a lock), issuing real X.509 leaf certificates for a set of
 * DNS names with Debian's `openssl` CLI. Nothing goes through a shell: every call is argv, the
 * names are checked against the server-name rule first, and the request's subject and
 * subjectAltName come from a configuration file this module writes from the checked names only.
 *
 * Leaves: an EC P-256 key, CN = the first name, SANs = every name (DNS), serverAuth, 90 days (as
 * ACME CAs issue). They are written atomically as `<dir>/<base>.crt` (the leaf alone, 0644) and
 * `<dir>/<base>.key` (0600) in a directory of root's (0700): the site's own account (its PHP) cannot
 * read the key.
 *
 * Locally nginx serves plain HTTP (DECISIONS "Hosted WordPress": certificates simulated for
 * serving): the certificates are issued and stored but no server presents them. An operator plugs an
 * ACME client in here and adds `listen 443 ssl` with these files to the site's server block.
 */
export const CERT_VALIDITY_DAYS = 90;
const CA_VALIDITY_DAYS = 3650;
const MAX_NAMES = 100;
const INSTALL_FIX = 'install Debian’s openssl package (apt-get install openssl)';

export interface IssuedCertificate {
  certFile: string;
  keyFile: string;
  /** ISO 8601 (UTC). */
  notAfter: string;
}

export function opensslBinary(): string {
  const found = findBinary('openssl', '/usr/bin/openssl');
  if (!found) throw new LocalServerError('openssl is missing: the local certificate authority issues certificates with it', INSTALL_FIX);
  return found;
}

/** The names checked as a certificate may hold them: lower-case DNS names of two labels or more, no wildcard. */
export function checkNames(names: string[]): string[] {
  if (names.length === 0 || names.length > MAX_NAMES) throw new Error(`a certificate holds 1 to ${MAX_NAMES} names`);
  for (const n of names) {
    if (typeof n !== 'string' || !SERVER_NAME.test(n) || !n.includes('.')) throw new Error(`refusing certificate name ${JSON.stringify(n)}`);
  }
  return [...new Set(names)];
}

/** A positive serial of 128 random bits, as `0x<hex>` for `-set_serial`. */
function serial(): string {
  const bytes = randomBytes(16);
  bytes[0] &= 0x7f;
  bytes[0] |= 0x01;
  return `0x${bytes.toString('hex')}`;
}

export class LocalCertificateAuthority {
  private ready: Promise<void> | null = null;

  /** `dir`: `<dataDir>/ca`. */
  constructor(private readonly dir: string) {}

  get certFile(): string {
    return path.join(this.dir, 'ca.crt');
  }

  private get keyFile(): string {
    return path.join(this.dir, 'ca.key');
  }

  /** The CA's key and certificate, made once (under a lock shared with other processes). */
  async ensure(): Promise<void> {
    this.ready ??= this.create().catch((err: unknown) => {
      this.ready = null;
      throw err;
    });
    return this.ready;
  }

  private async create(): Promise<void> {
    const openssl = opensslBinary();
    await makeDirectory(this.dir, 0o700);
    await withFileLock(path.join(this.dir, 'ca.lock'), async () => {
      if (existsSync(this.keyFile) && existsSync(this.certFile)) return;
      await this.scratch(async (tmp) => {
        const conf = path.join(tmp, 'ca.cnf');
        await fs.writeFile(
          conf,
          [
            '[req]',
            'distinguished_name = dn',
            'prompt = no',
            'x509_extensions = ca_ext',
            '[dn]',
            'O = Cloud platform (local)',
            'CN = Cloud local certificate authority',
            '[ca_ext]',
            'basicConstraints = critical,CA:TRUE,pathlen:0',
            'keyUsage = critical,keyCertSign,cRLSign',
            'subjectKeyIdentifier = hash',
            '',
          ].join('\n'),
          { mode: 0o600 },
        );
        const key = path.join(tmp, 'ca.key');
        const cert = path.join(tmp, 'ca.crt');
        await run(openssl, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', key]);
        await fs.chmod(key, 0o600);
        await run(openssl, [
          'req',
          '-x509',
          '-new',
          '-sha256',
          '-key',
          key,
          '-config',
          conf,
          '-days',
          String(CA_VALIDITY_DAYS),
          '-set_serial',
          serial(),
          '-out',
          cert,
        ]);
        await fs.chmod(cert, 0o644);
        // The key first: a certificate without its key is never left as the CA.
        await fs.rename(key, this.keyFile);
        await fs.rename(cert, this.certFile);
      });
    });
  }

  /** A private scratch directory inside the CA's, removed after `fn`. */
  private async scratch<T>(fn: (dir: string) => Promise<T>): Promise<T> {
    await makeDirectory(path.join(this.dir, 'tmp'), 0o700);
    const tmp = await fs.mkdtemp(path.join(this.dir, 'tmp', 'issue-'));
    try {
      return await fn(tmp);
    } finally {
      await fs.rm(tmp, { recursive: true, force: true });
    }
  }

  /**
   * Issues a certificate for `names` (the first is its CN) valid CERT_VALIDITY_DAYS, written as
   * `<dir>/<base>.crt` and `<dir>/<base>.key` (replacing an older one at once). `base` is a host
   * name too (the domain): it never names a path outside `dir`.
   */
  async issue(names: string[], into: { dir: string; base: string }): Promise<IssuedCertificate> {
    const checked = checkNames(names);
    if (!SERVER_NAME.test(into.base)) throw new Error(`refusing certificate file name ${JSON.stringify(into.base)}`);
    await this.ensure();
    const openssl = opensslBinary();
    return this.scratch(async (tmp) => {
      const conf = path.join(tmp, 'leaf.cnf');
      await fs.writeFile(
        conf,
        [
          '[req]',
          'distinguished_name = dn',
          'prompt = no',
          '[dn]',
          `CN = ${checked[0]}`,
          '[leaf_ext]',
          'basicConstraints = critical,CA:FALSE',
          'keyUsage = critical,digitalSignature',
          'extendedKeyUsage = serverAuth',
          'subjectKeyIdentifier = hash',
          'authorityKeyIdentifier = keyid,issuer',
          'subjectAltName = @alt_names',
          '[alt_names]',
          ...checked.map((n, i) => `DNS.${i + 1} = ${n}`),
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
      const key = path.join(tmp, 'leaf.key');
      const csr = path.join(tmp, 'leaf.csr');
      const cert = path.join(tmp, 'leaf.crt');
      await run(openssl, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', key]);
      await fs.chmod(key, 0o600);
      await run(openssl, ['req', '-new', '-sha256', '-key', key, '-config', conf, '-out', csr]);
      await run(openssl, [
        'x509',
        '-req',
        '-sha256',
        '-in',
        csr,
        '-CA',
        this.certFile,
        '-CAkey',
        this.keyFile,
        '-set_serial',
        serial(),
        '-days',
        String(CERT_VALIDITY_DAYS),
        '-extfile',
        conf,
        '-extensions',
        'leaf_ext',
        '-out',
        cert,
      ]);
      // What was signed is checked before it is installed: issued by this CA, for exactly these names.
      const pem = await fs.readFile(cert, 'utf8');
      const leaf = new X509Certificate(pem);
      const ca = new X509Certificate(await fs.readFile(this.certFile));
      if (!leaf.checkIssued(ca) || !leaf.verify(ca.publicKey)) throw new Error('the local CA issued a certificate it does not verify');
      const sans = (leaf.subjectAltName ?? '').split(', ').map((s) => s.replace(/^DNS:/, ''));
      if (sans.length !== checked.length || checked.some((n) => !sans.includes(n))) throw new Error('the issued certificate does not hold the names asked for');
      await fs.chmod(cert, 0o644);
      await makeDirectory(into.dir, 0o700);
      const certFile = path.join(into.dir, `${into.base}.crt`);
      const keyFile = path.join(into.dir, `${into.base}.key`);
      await fs.rename(key, keyFile);
      await fs.rename(cert, certFile);
      return { certFile, keyFile, notAfter: new Date(leaf.validTo).toISOString() };
    });
  }

  /** Removes `<dir>/<base>.{crt,key}`; absent is fine. */
  async remove(into: { dir: string; base: string }): Promise<void> {
    if (!SERVER_NAME.test(into.base)) throw new Error(`refusing certificate file name ${JSON.stringify(into.base)}`);
    await fs.rm(path.join(into.dir, `${into.base}.crt`), { force: true });
    await fs.rm(path.join(into.dir, `${into.base}.key`), { force: true });
  }
}
