/**
 * The ports of the platform's own servers on this machine, which nothing a customer points at
 * loopback may reach, even with ALLOW_INSECURE_TARGETS (webhook targets, load-balancer backends):
 * the API (its loopback-only `/_dev` stand-ins act on any account), the Temporal frontend, its HTTP
 * API and UI, PowerDNS's HTTP API and DNS port, and the control plane's PostgreSQL. Each process
 * registers the ports its configuration names when it starts (api/bootstrap.ts, workers/worker.ts:
 * `protectLocalPorts(localServicePorts(config))`), and test stacks add the ephemeral ports they
 * listen on. Ports that come and go (every DBaaS instance's) are looked up when a check runs
 * (providers/lb.targets.ts).
 */
const protectedLocalPorts = new Set<number>();

export function protectLocalPorts(ports: Iterable<number>): void {
  for (const port of ports) if (Number.isInteger(port) && port > 0 && port <= 65535) protectedLocalPorts.add(port);
}

/**
 * Forgets ports registered earlier: a process that runs test file after test file (vitest's workers)
 * gives back the ephemeral ports of a file's servers once they are gone, so that a later file's
 * server that happens to get one of those ports is not taken for the platform's.
 */
export function forgetLocalPorts(ports: Iterable<number>): void {
  for (const port of ports) protectedLocalPorts.delete(port);
}

/** Every port registered so far (a copy). */
export function registeredLocalPorts(): number[] {
  return [...protectedLocalPorts];
}

export function isProtectedLocalPort(port: number): boolean {
  return protectedLocalPorts.has(port);
}

/** The port of a URL, its scheme's default when it names none; NaN when it is not a URL. */
function urlPort(text: string, defaults: Record<string, number>): number {
  try {
    const url = new URL(text);
    return Number(url.port || defaults[url.protocol] || NaN);
  } catch {
    return NaN;
  }
}

/** The port of `host:port` or `[v6]:port`; NaN without one. */
function addressPort(text: string): number {
  const match = /:(\d{1,5})$/.exec(text);
  return match ? Number(match[1]) : NaN;
}

export interface PlatformPortsConfig {
  PORT: number;
  TEMPORAL_ADDRESS: string;
  TEMPORAL_UI_URL: string;
  WEBHOOK_PROTECTED_PORTS: number[];
  POWERDNS_API_URL?: string;
  DNS_SERVER_ADDRESS?: string;
  DATABASE_URL?: string;
  /** The image delivery plane's port. */
  IMAGES_PORT?: number;
}

/**
 * The ports of the local services a configuration names: API, Temporal frontend and UI, PowerDNS's
 * API and DNS port, the control plane's PostgreSQL, the image delivery plane, and WEBHOOK_PROTECTED_PORTS (npm start adds the
 * Temporal dev server's HTTP API and metrics ports there).
 */
export function localServicePorts(config: PlatformPortsConfig): number[] {
  const http = { 'http:': 80, 'https:': 443 };
  return [
    config.PORT,
    addressPort(config.TEMPORAL_ADDRESS),
    urlPort(config.TEMPORAL_UI_URL, http),
    config.POWERDNS_API_URL ? urlPort(config.POWERDNS_API_URL, http) : NaN,
    config.DNS_SERVER_ADDRESS ? addressPort(config.DNS_SERVER_ADDRESS) : NaN,
    config.DATABASE_URL ? urlPort(config.DATABASE_URL, { 'postgres:': 5432, 'postgresql:': 5432 }) : NaN,
    config.IMAGES_PORT ?? NaN,
    ...config.WEBHOOK_PROTECTED_PORTS,
  ].filter((p) => Number.isInteger(p) && p > 0 && p <= 65535);
}
