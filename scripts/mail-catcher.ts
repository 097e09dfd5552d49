import { mkdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { SMTPServer } from 'smtp-server';

/**
 * `npm start`'s stand-in for the recipients' mail servers (DECISIONS: MAIL_SMARTHOST replaces MX
 * lookup in local runs): an SMTP server on loopback that takes every message and keeps it as an
 * `.eml` file in `dir`, so what the gateway sends can be opened (DKIM-Signature included). A
 * recipient whose local part starts with `bounce` is refused with 550, to try bounces.
 */
export async function startMailCatcher(dir: string): Promise<{ address: string; close(): Promise<void> }> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  let n = 0;
  const server = new SMTPServer({
    name: 'mail-catcher.localhost',
    banner: 'local mail catcher (npm start)',
    disabledCommands: ['AUTH', 'STARTTLS'],
    authOptional: true,
    disableReverseLookup: true,
    logger: false,
    onRcptTo(address, _session, callback) {
      if (address.address.startsWith('bounce'))
        return callback(Object.assign(new Error('5.1.1 no such user (the local mail catcher refuses bounce*)'), { responseCode: 550 }));
      callback();
    },
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${++n}.eml`);
        writeFileSync(file, Buffer.concat(chunks), { mode: 0o600 });
        callback(null, `kept as ${path.basename(file)}`);
      });
    },
  });
  await new Promise<void>((resolve) => server.server.listen(0, '127.0.0.1', () => resolve()));
  return {
    address: `127.0.0.1:${(server.server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
