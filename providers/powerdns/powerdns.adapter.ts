import {
  compareRRsets,
  fingerprintRRsets,
  type DnsProvider,
  type DnsRRset,
  type DnsZoneInfo,
  type DnsZoneKind,
  type RRsetType,
  type ZoneDefaults,
} from '../dns.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';

/**
 * The DNS provider over PowerDNS Authoritative's HTTP API (4.x, `/api/v1/servers/localhost`). Zones
 * are created with SOA-EDIT-API INCREASE, so the server raises the SOA serial by one on every change
 * made through the API. The API key travels only in the X-API-Key header; it is in no error message.
 *
 * Writes: the gsqlite3 backend takes one writer at a time and answers a second concurrent write with
 * 500 ("database is locked") instead of waiting. So this adapter sends its writes one after the other,
 * and retries a 500 with a short backoff for writers in other processes (API and worker); every call
 * is idempotent (REPLACE, DELETE, a create that finds the zone), so a retry cannot apply twice.
 */
export interface PowerDnsAdapterOptions {
  /** The webserver's base URL, e.g. `http://127.0.0.1:5380`. */
  apiUrl: string;
  /** The key, or how to read it (the local server writes it to a file once it starts). */
  apiKey: string | (() => string);
  serverId?: string;
  /** Per call; past it the server counts as not answering. */
  timeoutMs?: number;
  /** The backend name in errors (the outage switch's name). */
  backend?: string;
  /** How long a call keeps retrying a server that answers 500 (a busy database) before giving up. */
  retryBudgetMs?: number;
}

interface PdnsRecord {
  content: string;
  disabled: boolean;
}
interface PdnsRRset {
  name: string;
  type: string;
  ttl: number;
  records: PdnsRecord[];
}
interface PdnsZone {
  name: string;
  kind: string;
  serial: number;
  rrsets?: PdnsRRset[];
}

/** A 5xx answer: the server is there but failed the call (with gsqlite3, mostly a locked database). */
class ServerBusy extends Error {
  constructor(readonly status: number) {
    super(`HTTP ${status}`);
  }
}

const fqdnDot = (name: string) => `${name}.`;
const noDot = (name: string) => name.replace(/\.$/, '').toLowerCase();

export class PowerDnsAdapter implements DnsProvider {
  private readonly base: string;
  private readonly backend: string;
  private readonly timeoutMs: number;
  private readonly retryBudgetMs: number;
  /** The tail of this adapter's queue of writes. */
  private writes: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: PowerDnsAdapterOptions) {
    this.base = `${options.apiUrl.replace(/\/$/, '')}/api/v1/servers/${options.serverId ?? 'localhost'}`;
    this.backend = options.backend ?? 'dns';
    this.timeoutMs = options.timeoutMs ?? 5_000;
    this.retryBudgetMs = options.retryBudgetMs ?? 3_000;
  }

  async createZone(zone: string, defaults: ZoneDefaults): Promise<DnsZoneInfo> {
    const [primary] = defaults.nameservers;
    if (!primary) throw new BackendRefusedError(this.backend, 'No name servers are configured for new zones.', 'misconfigured');
    const host = (name: string) => `${noDot(name.replace('@', '.'))}.`;
    const soa = `${host(primary)} ${host(defaults.hostmaster)} 1 ${defaults.refresh} ${defaults.retry} ${defaults.expire} ${defaults.minimum}`;
    const response = await this.request('POST', '/zones', {
      body: {
        name: fqdnDot(zone),
        kind: 'Native',
        soa_edit_api: 'INCREASE',
        nameservers: [],
        rrsets: [
          { name: fqdnDot(zone), type: 'SOA', ttl: defaults.ttl, records: [{ content: soa, disabled: false }] },
          { name: fqdnDot(zone), type: 'NS', ttl: defaults.ttl, records: defaults.nameservers.map((ns) => ({ content: host(ns), disabled: false })) },
        ],
      },
      accept: [201, 409],
    });
    // 409: the zone is there already (a retried call); report it as it is.
    if (response.status === 409) return this.zoneInfo(zone);
    return this.toInfo((await response.json()) as PdnsZone);
  }

  async deleteZone(zone: string): Promise<void> {
    await this.request('DELETE', this.zonePath(zone), { accept: [204, 404] });
  }

  async zoneInfo(zone: string): Promise<DnsZoneInfo> {
    return this.toInfo(await this.getZone(zone));
  }

  async listRRsets(zone: string): Promise<DnsRRset[]> {
    return this.toRRsets((await this.getZone(zone)).rrsets ?? []);
  }

  async getRRset(zone: string, name: string, type: RRsetType | 'SOA'): Promise<DnsRRset | null> {
    const query = new URLSearchParams({ rrset_name: fqdnDot(name), rrset_type: type });
    const found = this.toRRsets((await this.getZone(zone, query)).rrsets ?? []).filter((r) => r.name === name && r.type === type);
    return found[0] ?? null;
  }

  async replaceRRset(zone: string, rrset: DnsRRset & { type: RRsetType }): Promise<void> {
    if (rrset.values.length === 0) return this.deleteRRset(zone, rrset.name, rrset.type);
    await this.patch(zone, {
      name: fqdnDot(rrset.name),
      type: rrset.type,
      ttl: rrset.ttl,
      changetype: 'REPLACE',
      records: rrset.values.map((content) => ({ content, disabled: false })),
    });
  }

  async deleteRRset(zone: string, name: string, type: RRsetType): Promise<void> {
    await this.patch(zone, { name: fqdnDot(name), type, changetype: 'DELETE' });
  }

  async exportZone(zone: string): Promise<string> {
    // With Accept: application/json the server wraps the file in {"zone": ...}; ask for the file itself.
    const response = await this.request('GET', `${this.zonePath(zone)}/export`, { zone, accept: [200], as: 'text/plain' });
    return response.text();
  }

  async fingerprint(zone: string): Promise<string> {
    return fingerprintRRsets(await this.listRRsets(zone));
  }

  private resolvedKey: string | null = null;

  private apiKey(): string {
    const { apiKey } = this.options;
    if (typeof apiKey === 'string') return apiKey;
    try {
      this.resolvedKey ??= apiKey();
      return this.resolvedKey;
    } catch {
      throw new BackendUnavailableError(this.backend, 'no API key (the local server has not started yet?)');
    }
  }

  // ---- HTTP -----------------------------------------------------------------------------------------

  private zonePath(zone: string): string {
    return `/zones/${encodeURIComponent(fqdnDot(zone))}`;
  }

  private async getZone(zone: string, query?: URLSearchParams): Promise<PdnsZone> {
    const response = await this.request('GET', `${this.zonePath(zone)}${query ? `?${query}` : ''}`, { zone, accept: [200] });
    return (await response.json()) as PdnsZone;
  }

  private async patch(zone: string, rrset: Record<string, unknown>): Promise<void> {
    await this.request('PATCH', this.zonePath(zone), { zone, body: { rrsets: [rrset] }, accept: [204] });
  }

  /** One call, retried while the server answers 500 and the budget lasts; writes queued one at a time. */
  private async request(method: string, path: string, options: { body?: unknown; zone?: string; accept: number[]; as?: string }): Promise<Response> {
    const attempt = async () => {
      const until = Date.now() + this.retryBudgetMs;
      for (let n = 0; ; n++) {
        try {
          return await this.send(method, path, options);
        } catch (err) {
          if (!(err instanceof ServerBusy) || Date.now() >= until) {
            if (err instanceof ServerBusy) throw new BackendUnavailableError(this.backend, `HTTP ${err.status}`);
            throw err;
          }
          await new Promise((r) => setTimeout(r, Math.min(200, 10 * 2 ** n) * (0.5 + Math.random())));
        }
      }
    };
    if (method === 'GET') return attempt();
    const queued = this.writes.then(attempt, attempt);
    this.writes = queued.catch(() => undefined);
    return queued;
  }

  /**
   * One API call. Not answering, timing out, 5xx and a refused key are "unavailable" (nothing a
   * customer can fix); 404 on a zone is "gone"; 422 and other 4xx are the server refusing the change.
   */
  private async send(
    method: string,
    path: string,
    { body, zone, accept, as = 'application/json' }: { body?: unknown; zone?: string; accept: number[]; as?: string },
  ): Promise<Response> {
    let response: Response;
    try {
      const apiKey = this.apiKey();
      response = await fetch(`${this.base}${path}`, {
        method,
        headers: {
          'X-API-Key': apiKey,
          Accept: as,
          ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      if (err instanceof BackendUnavailableError) throw err;
      const detail = (err as Error).name === 'TimeoutError' ? `no answer within ${this.timeoutMs} ms` : 'connection failed';
      throw new BackendUnavailableError(this.backend, detail);
    }
    if (accept.includes(response.status)) return response;
    const text = await response.text().catch(() => '');
    if (response.status === 404 && zone !== undefined) throw new BackendGoneError(this.backend, `zone ${zone}`);
    if (response.status >= 500) throw new ServerBusy(response.status);
    if (response.status === 401 || response.status === 403) throw new BackendUnavailableError(this.backend, `HTTP ${response.status}`);
    throw this.refusal(text, response.status);
  }

  private refusal(text: string, status: number): BackendRefusedError {
    let message = text;
    try {
      message = (JSON.parse(text) as { error?: string }).error ?? text;
    } catch {
      // not JSON: keep the text
    }
    message = message.replace(/\s*\(try 'pdnsutil check-zone'\)/, '').trim() || `HTTP ${status}`;
    const code = /Conflicts with pre-existing RRset|conflicts with/i.test(message)
      ? 'conflict'
      : /out of zone/i.test(message)
        ? 'out_of_zone'
        : 'invalid_content';
    return new BackendRefusedError(this.backend, `The DNS server refused the change: ${message}`, code);
  }

  // ---- shapes ---------------------------------------------------------------------------------------

  private toRRsets(rrsets: PdnsRRset[]): DnsRRset[] {
    return rrsets
      .map((r) => ({
        name: noDot(r.name),
        type: r.type,
        ttl: r.ttl,
        values: r.records
          .filter((rec) => !rec.disabled)
          .map((rec) => rec.content)
          .sort(),
      }))
      .filter((r) => r.values.length > 0)
      .sort(compareRRsets);
  }

  private toInfo(zone: PdnsZone): DnsZoneInfo {
    const name = noDot(zone.name);
    const rrsets = this.toRRsets(zone.rrsets ?? []);
    const ns = rrsets.find((r) => r.name === name && r.type === 'NS');
    return {
      name,
      kind: zone.kind.toLowerCase() as DnsZoneKind,
      serial: zone.serial,
      nameservers: (ns?.values ?? []).map(noDot),
      recordCount: rrsets.reduce((n, r) => n + r.values.length, 0),
    };
  }
}
