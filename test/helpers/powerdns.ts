import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PowerDnsAdapter } from '../../providers/powerdns/powerdns.adapter';
import { PowerDnsServer, stopPowerDnsServer } from '../../providers/powerdns/powerdns.server';
import { DEFAULT_SOA_TIMERS, type ZoneDefaults } from '../../providers/dns.provider';
import { accountNameFor, removeAccount } from '../../providers/os-accounts';

/** What new zones get in tests: two name servers outside the zones, a hostmaster, the default timers. */
export const TEST_ZONE_DEFAULTS: ZoneDefaults = {
  nameservers: ['ns1.dns-test.example.net', 'ns2.dns-test.example.net'],
  hostmaster: 'hostmaster.dns-test.example.net',
  ...DEFAULT_SOA_TIMERS,
};

export interface TestPowerDns {
  server: PowerDnsServer;
  adapter: PowerDnsAdapter;
  dataDir: string;
  close(): Promise<void>;
}

/** A real PowerDNS for one test file: its own temp data dir, DNS and API on free loopback ports. */
export async function startTestPowerDns(): Promise<TestPowerDns> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'cloud-pdns-'));
  const server = await PowerDnsServer.start({ dataDir, dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' });
  const adapter = new PowerDnsAdapter({ apiUrl: server.apiUrl, apiKey: server.apiKey, timeoutMs: 5_000 });
  const pdns: TestPowerDns = {
    server,
    adapter,
    dataDir,
    async close() {
      // A test may have restarted the server: stop the one running now, through the data directory's pidfile
      // (it runs detached, so it would outlive the test file).
      await pdns.server.stop();
      await stopPowerDnsServer(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
      // The server's own account, made only on a machine without Debian's `pdns` (never removes that one).
      await removeAccount(accountNameFor('dns', dataDir, 'powerdns'));
    },
  };
  return pdns;
}
