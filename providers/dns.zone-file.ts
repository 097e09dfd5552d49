import type { DnsRRset } from './dns.provider';

/**
 * The zone-file form PowerDNS's export writes: one record per line, absolute owner names with the
 * trailing dot, `name<TAB>ttl<TAB>IN<TAB>type<TAB>content`, lines sorted by owner name, type and content.
 * The simulator writes the same; parseZoneFile reads it back (and any file in this one-record-per-line form).
 */
export function formatZoneFile(rrsets: readonly DnsRRset[]): string {
  const lines = rrsets.flatMap((r) => r.values.map((v) => ({ name: `${r.name}.`, type: r.type, ttl: r.ttl, content: v })));
  lines.sort((a, b) => cmp(a.name, b.name) || cmp(a.type, b.type) || cmp(a.content, b.content));
  return lines.map((l) => `${l.name}\t${l.ttl}\tIN\t${l.type}\t${l.content}\n`).join('');
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** RRsets of a zone file in the exported form (comments, blank lines and `$` directives are skipped). */
export function parseZoneFile(text: string): DnsRRset[] {
  const sets = new Map<string, DnsRRset>();
  for (const line of text.split('\n')) {
    if (line.trim() === '' || line.startsWith(';') || line.startsWith('$')) continue;
    const m = /^(\S+)\s+(\d+)\s+IN\s+([A-Z0-9]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`not a zone-file record line: ${line}`);
    const name = m[1].replace(/\.$/, '').toLowerCase();
    const key = `${name} ${m[3]}`;
    const set = sets.get(key) ?? { name, type: m[3], ttl: Number(m[2]), values: [] };
    set.values.push(m[4].trimEnd());
    sets.set(key, set);
  }
  return [...sets.values()].map((s) => ({ ...s, values: s.values.sort() }));
}
