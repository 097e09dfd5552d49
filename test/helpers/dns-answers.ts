import dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';

/**
 * A tiny DNS server on loopback for tests that check "does this name point here" through
 * DNS_RESOLVER (CaaS domains): it answers A queries for the names it is given, NOERROR with no
 * answer for other types of those names, and NXDOMAIN for every other name. UDP only.
 */
export interface DnsAnswers {
  /** `127.0.0.1:<port>`, for DNS_RESOLVER. */
  address: string;
  set(name: string, ipv4: string | null): void;
  close(): Promise<void>;
}

export async function startDnsAnswers(): Promise<DnsAnswers> {
  const records = new Map<string, string>();
  const socket = dgram.createSocket('udp4');
  socket.on('message', (query, from) => {
    if (query.length < 12) return;
    let offset = 12;
    const labels: string[] = [];
    while (offset < query.length && query[offset] !== 0) {
      const length = query[offset];
      labels.push(query.subarray(offset + 1, offset + 1 + length).toString('ascii'));
      offset += length + 1;
    }
    const questionEnd = offset + 5;
    const type = query.readUInt16BE(offset + 1);
    const name = labels.join('.').toLowerCase();
    const ip = records.get(name);
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2);
    header.writeUInt16BE(ip === undefined ? 0x8183 : 0x8180, 2);
    header.writeUInt16BE(1, 4);
    const answer = ip !== undefined && type === 1;
    header.writeUInt16BE(answer ? 1 : 0, 6);
    const parts = [header, query.subarray(12, questionEnd)];
    if (answer) {
      const rr = Buffer.alloc(16);
      rr.writeUInt16BE(0xc00c, 0);
      rr.writeUInt16BE(1, 2);
      rr.writeUInt16BE(1, 4);
      rr.writeUInt32BE(60, 6);
      rr.writeUInt16BE(4, 10);
      ip!.split('.').forEach((octet, i) => rr.writeUInt8(Number(octet), 12 + i));
      parts.push(rr);
    }
    socket.send(Buffer.concat(parts), from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(socket.address() as AddressInfo).port}`,
    set(name, ipv4) {
      if (ipv4 === null) records.delete(name.toLowerCase());
      else records.set(name.toLowerCase(), ipv4);
    },
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}
