/**
 * TLS for the database instances: one certificate authority per install (generated on first use
 * with the openssl CLI, kept under `<root>/ca/`), and a server certificate per instance signed by
 * it, valid for that instance's own loopback address only (no `localhost`, no shared address): a
 * client that verifies the name (verify-full) against the CA that `connection` returns reaches its
 * own instance or none, even when another instance's server answers on its address.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { exists, run, runningAsRoot, withFileLock, type Account } from './system';

export interface CertificateAuthority {
  certFile: string;
  keyFile: string;
}

const CA_DAYS = 3650;
const SERVER_DAYS = 825;
const CURVE = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];

/** The install's CA, created once (by whichever process gets there first). */
export async function ensureCertificateAuthority(root: string): Promise<CertificateAuthority> {
  const dir = path.join(root, 'ca');
  const ca = { certFile: path.join(dir, 'ca.crt'), keyFile: path.join(dir, 'ca.key') };
  if (await exists(ca.certFile)) return ca;
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  return withFileLock(path.join(dir, '.lock'), async () => {
    if (await exists(ca.certFile)) return ca;
    const keyTmp = `${ca.keyFile}.tmp`;
    const certTmp = `${ca.certFile}.tmp`;
    const subject = `/O=Cloud control plane/CN=DBaaS CA ${os.hostname()} ${new Date().toISOString().slice(0, 10)}`;
    await run('openssl', [
      'req',
      '-x509',
      ...CURVE,
      '-nodes',
      '-keyout',
      keyTmp,
      '-out',
      certTmp,
      '-days',
      String(CA_DAYS),
      '-subj',
      subject,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    await fs.chmod(keyTmp, 0o600);
    await fs.chmod(certTmp, 0o644);
    // The certificate last: its presence means the pair is complete.
    await fs.rename(keyTmp, ca.keyFile);
    await fs.rename(certTmp, ca.certFile);
    return ca;
  });
}

export async function readCaCertificate(ca: CertificateAuthority): Promise<string> {
  return fs.readFile(ca.certFile, 'utf8');
}

/**
 * Issues `server.key` / `server.crt` into `dir` for the given addresses, readable only by the
 * account the server runs as (which gets `dir` too).
 */
export async function issueServerCertificate(
  ca: CertificateAuthority,
  dir: string,
  opts: { commonName: string; ips: string[]; dnsNames: string[]; owner: Account },
): Promise<{ certFile: string; keyFile: string }> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  const keyFile = path.join(dir, 'server.key');
  const certFile = path.join(dir, 'server.crt');
  const csr = path.join(dir, 'server.csr');
  const ext = path.join(dir, 'server.ext');
  const san = [...opts.ips.map((ip) => `IP:${ip}`), ...opts.dnsNames.map((n) => `DNS:${n}`)].join(',');
  await fs.writeFile(
    ext,
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      `subjectAltName=${san}`,
      '',
    ].join('\n'),
  );
  await run('openssl', ['req', '-new', ...CURVE, '-nodes', '-keyout', keyFile, '-out', csr, '-subj', `/O=Cloud control plane/CN=${opts.commonName}`]);
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.certFile,
    '-CAkey',
    ca.keyFile,
    '-set_serial',
    `0x${randomBytes(16).toString('hex')}`,
    '-days',
    String(SERVER_DAYS),
    '-sha256',
    '-extfile',
    ext,
    '-out',
    certFile,
  ]);
  await fs.rm(csr, { force: true });
  await fs.rm(ext, { force: true });
  // PostgreSQL refuses a key readable by others.
  await fs.chmod(keyFile, 0o600);
  await fs.chmod(certFile, 0o644);
  if (runningAsRoot()) {
    await fs.chown(keyFile, opts.owner.uid, opts.owner.gid);
    await fs.chown(certFile, opts.owner.uid, opts.owner.gid);
    await fs.chown(dir, opts.owner.uid, opts.owner.gid);
  }
  return { certFile, keyFile };
}
