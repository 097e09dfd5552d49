/** Ports of local servers: found free, probed before a server would find out by failing, split and joined. */
import { createSocket } from 'node:dgram';
import net from 'node:net';

/** A loopback TCP port nobody listens on right now (the OS picks it). */
export function freeLoopbackPort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** A port free on `host` for TCP and, when asked, UDP too (DNS listens on both). */
export async function freePort(host: string, { udp }: { udp: boolean }): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await freeLoopbackPort(host);
    if (!udp || (await udpFree(host, port))) return port;
  }
  throw new Error(`no free port found on ${host}`);
}

function udpFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    socket.once('error', () => resolve(false));
    socket.bind(port, host, () => socket.close(() => resolve(true)));
  });
}

/** Whether something accepts TCP connections on host:port. */
export function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Whether `address:port` can be bound now (TCP, and UDP too when asked). A server would only find
 * out while starting or reloading, so its manager asks first.
 */
export async function probeBind(
  address: string,
  port: number,
  { udp = false }: { udp?: boolean } = {},
): Promise<'free' | 'in_use' | 'not_permitted' | 'no_address'> {
  const tcp = await new Promise<'free' | 'in_use' | 'not_permitted' | 'no_address'>((resolve) => {
    const server = net.createServer();
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') resolve('in_use');
      else if (err.code === 'EACCES' || err.code === 'EPERM') resolve('not_permitted');
      else resolve('no_address');
    });
    server.listen({ host: address, port, exclusive: true }, () => server.close(() => resolve('free')));
  });
  if (tcp !== 'free' || !udp) return tcp;
  return (await udpFree(address, port)) ? 'free' : 'in_use';
}

export function splitHostPort(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address.trim());
  if (!m || Number(m[2]) > 65535) throw new Error(`"${address}" is not host:port`);
  return { host: m[1], port: Number(m[2]) };
}

export const joinHostPort = (host: string, port: number) => (host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`);
