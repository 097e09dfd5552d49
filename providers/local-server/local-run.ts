/**
 * What a local run (`npm start`, scripts/dev.ts) of one checkout needs so that a second checkout on
 * the same machine can run beside it: address ranges of its own for the servers it makes, and ports
 * of its own wherever the usual ones are taken.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import { freeLoopbackPort, probeBind } from './ports';

/**
 * The loopback ranges a checkout's balancers and database instances listen in when LB_BIND_ADDRESS
 * and DBAAS_ADDRESS_RANGE are unset: `127.<x>.0.0/16` and `127.<x+1>.0.0/16`, `x` even and picked
 * by the checkout's path (16 to 234: clear of 127.0.0.1, where the API and the demo backends listen).
 * Two checkouts collide only when their hashes do (1 in 110); setting the variables settles it.
 */
export function checkoutRanges(checkout: string): { lb: string; dbaas: string; caas: string } {
  const n = createHash('sha256').update(path.resolve(checkout)).digest().readUInt32BE(0) % 110;
  const x = 16 + 2 * n;
  return { lb: `127.${x}.0.0/16`, dbaas: `127.${x + 1}.0.0/16`, caas: `10.${100 + n}.0.0/16` };
}

/**
 * `preferred` when it can be bound on `host` now, else a port found free there: the second
 * checkout's API, Temporal or PowerDNS moves aside instead of failing on the first one's port.
 */
export async function portOrFree(host: string, preferred: number, { udp = false }: { udp?: boolean } = {}): Promise<number> {
  if ((await probeBind(host, preferred, { udp })) === 'free') return preferred;
  for (;;) {
    const port = await freeLoopbackPort(host);
    if ((await probeBind(host, port, { udp })) === 'free') return port;
  }
}
