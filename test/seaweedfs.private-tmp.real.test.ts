import { chmodSync, existsSync, lchownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { accountNameFor, isolatedAccounts, removeAccount } from '../providers/os-accounts';
import { SeaweedServer, stopSeaweedServer } from '../providers/seaweedfs/seaweedfs.server';

/**
 * `weed server` also serves its master's, volume server's, filer's and S3 gateway's gRPC ports on
 * sockets at fixed paths in /tmp (/tmp/seaweedfs-master-grpc-<port>.sock), and its parts dial such a
 * file whenever it exists. Another account's file there (a run killed half way, a tenant's planted
 * socket) used to be dialled: "permission denied" and a volume server that never found its master
 * (a two-checkout `npm start` failed on a stale one), or a tenant's socket taking the master's
 * place. The server now has a /tmp of its own (providers/local-server `inPrivateTmp`).
 */
const root = mkdtempSync(path.join(tmpdir(), 'seaweed-private-tmp-'));
chmodSync(root, 0o711); // the server's account passes through to its data directory
const dataDir = path.join(root, 'seaweedfs');
const planted: string[] = [];
const listeners: net.Server[] = [];

afterAll(async () => {
  await stopSeaweedServer(dataDir);
  for (const server of listeners) await new Promise((r) => server.close(r));
  for (const file of planted) rmSync(file, { force: true });
  rmSync(root, { recursive: true, force: true });
  await removeAccount(accountNameFor('s3', dataDir, 'seaweedfs'));
});

const start = () => SeaweedServer.start({ dataDir, bindAddress: '127.0.0.1', region: 'us-east-1', startTimeoutMs: 40_000 });

describe.skipIf(!isolatedAccounts())('SeaweedFS and the sockets other accounts put in /tmp', () => {
  it("starts and serves with another account's socket at its gRPC paths, which it never dials; its own sockets stay in its directory", async () => {
    const first = await start();
    const ports = first.settings.ports;
    await stopSeaweedServer(dataDir);

    // Sockets of another account (nobody) at the paths weed uses, open to anyone, counting who connects.
    let dialled = 0;
    const grpc = { master: ports.masterGrpc, volume: ports.volumeGrpc, filer: ports.filerGrpc, s3: ports.s3Grpc };
    for (const [part, port] of Object.entries(grpc)) {
      const file = `/tmp/seaweedfs-${part}-grpc-${port}.sock`;
      rmSync(file, { force: true });
      const server = net.createServer((socket) => {
        dialled++;
        socket.destroy();
      });
      await new Promise<void>((resolve) => server.listen(file, resolve));
      listeners.push(server);
      planted.push(file);
      lchownSync(file, 65534, 65534);
      chmodSync(file, 0o777);
    }

    const again = await start();
    expect(again.adopted).toBe(false);
    expect(await again.answers()).toBe(true);
    expect(dialled).toBe(0);
    // Its own gRPC sockets are in its private /tmp, none of them in the machine's.
    const own = readdirSync(path.join(dataDir, 'tmp')).filter((f) => /^seaweedfs-.*-grpc-\d+\.sock$/.test(f));
    expect(own).toEqual(expect.arrayContaining([`seaweedfs-master-grpc-${ports.masterGrpc}.sock`, `seaweedfs-volume-grpc-${ports.volumeGrpc}.sock`]));
    for (const file of planted) expect(statSync(file).uid).toBe(65534);
    expect(existsSync(`/tmp/seaweedfs-master-grpc-${ports.masterGrpc}.sock`)).toBe(true);
    // The server runs as its own account, not root, with the pid of its pidfile.
    const status = await import('node:fs/promises').then((fs) => fs.readFile(`/proc/${again.pid}/status`, 'utf8'));
    expect(Number(/^Uid:\s+(\d+)/m.exec(status)![1])).not.toBe(0);
  }, 150_000);
});
