import { isIPv4, isIPv6 } from 'node:net';
import { domainToASCII } from 'node:url';
import type { RRsetType } from './dns.provider';

/**
 * The grammar of record values, as the DNS server enforces it (what PowerDNS accepts, in the one
 * presentation form it keeps): the backend's own contract, so the simulator refuses what PowerDNS
 * refuses, and the API checks a customer's values with it before anything reaches the server
 * (domain/dns/values.ts and domain/dns/names.ts re-throw DnsValueError as the API's 400).
 *
 * Each customer value is checked and brought into the one presentation form the DNS server keeps
 * (so that the value read back equals the value written, and a server that re-formats content does
 * not see a difference). `param` names the value (`values.2`).
 */

/** A value that breaks the grammar: `param` is the field at fault, `message` says why (written for customers). */
export class DnsValueError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message);
    this.name = 'DnsValueError';
  }
}

const CHUNK_BYTES = 255;
/** A record's data is at most 65535 bytes; text beyond this many bytes cannot fit. */
const MAX_TEXT_BYTES = 65_000;

const invalid = (param: string, message: string) => new DnsValueError(param, message);

// ---- host names ----------------------------------------------------------------------------------

/** A domain name has at most this many characters (without the trailing dot). */
export const MAX_NAME_LENGTH = 253;
/** Owner names and targets also carry service labels (`_sip._tcp`, `_dmarc`) and hyphens anywhere. */
export const OWNER_LABEL = /^[a-z0-9_-]{1,63}$/;

/** Lower case, no trailing dot, IDN to punycode; '' when the text is not a domain name at all. */
export function toAscii(input: string): string {
  const trimmed = input.trim();
  // domainToASCII parses a URL host: it would drop a "/path" or "?query" and decode "%41", so any ASCII
  // character a DNS name cannot hold is refused before it gets there.
  if (trimmed === '' || [...trimmed].some((c) => c < '\u0080' && !/[A-Za-z0-9_.*-]/.test(c))) return '';
  return domainToASCII(trimmed).toLowerCase();
}

export function stripDot(name: string): string {
  return name.endsWith('.') ? name.slice(0, -1) : name;
}

/**
 * A host name inside record data (CNAME, NS, PTR, MX and SRV targets), always absolute: a trailing
 * dot is optional on input and present in the result (`Mail.Example.org` -> `mail.example.org.`).
 * `allowRoot` admits `.` (null MX, "no service" SRV).
 */
export function normalizeTarget(input: string, param: string, allowRoot = false): string {
  const raw = input.trim();
  if (raw === '.') {
    if (allowRoot) return '.';
    throw invalid(param, '"." (the root) is not a valid target here.');
  }
  const ascii = stripDot(toAscii(raw));
  const labels = ascii.split('.');
  if (!ascii || ascii.length > MAX_NAME_LENGTH || !labels.every((l) => OWNER_LABEL.test(l))) {
    throw invalid(param, `"${input}" is not a valid host name.`);
  }
  return `${ascii}.`;
}

function uint(text: string, max: number, param: string, what: string): number {
  if (!/^[0-9]{1,5}$/.test(text) || Number(text) > max) throw invalid(param, `${what} must be an integer from 0 to ${max}, not "${text}".`);
  return Number(text);
}

function fields(value: string, count: number, param: string, shape: string): string[] {
  const parts = value.trim().split(/\s+/);
  if (parts.length !== count || parts[0] === '') throw invalid(param, `expected "${shape}", got "${value}".`);
  return parts;
}

// ---- addresses ---------------------------------------------------------------------------------

function ipv4(value: string, param: string): string {
  const v = value.trim();
  // node's isIPv4 refuses leading zeros, which some resolvers would read as octal.
  if (!isIPv4(v)) throw invalid(param, `"${value}" is not an IPv4 address (such as 192.0.2.1).`);
  return v;
}

function ipv6Words(text: string): number[] {
  let head = text;
  const tail: number[] = [];
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    head = dotted[1].endsWith('::') ? dotted[1] : dotted[1].slice(0, -1);
    const b = dotted[2].split('.').map(Number);
    tail.push((b[0] << 8) | b[1], (b[2] << 8) | b[3]);
  }
  const [left, right] = head.includes('::') ? head.split('::') : [head, null];
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((h) => parseInt(h, 16)));
  const l = parse(left);
  const r = right === null ? [] : parse(right);
  const zeros = 8 - l.length - r.length - tail.length;
  return [...l, ...Array(right === null ? 0 : zeros).fill(0), ...r, ...tail];
}

/** RFC 5952: lower case, no leading zeros, the longest run (2+) of zero groups as `::` (the first on a tie). */
function formatIpv6(words: number[]): string {
  let best = { start: -1, len: 0 };
  for (let i = 0; i < 8;) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > best.len && j - i >= 2) best = { start: i, len: j - i };
    i = j;
  }
  const hex = words.map((w) => w.toString(16));
  if (best.start < 0) return hex.join(':');
  return `${hex.slice(0, best.start).join(':')}::${hex.slice(best.start + best.len).join(':')}`;
}

function ipv6(value: string, param: string): string {
  const v = value.trim();
  if (!isIPv6(v) || v.includes('%')) throw invalid(param, `"${value}" is not an IPv6 address (such as 2001:db8::1).`);
  const words = ipv6Words(v.toLowerCase());
  const embedsIpv4 = words.slice(0, 5).every((w) => w === 0) && (words[5] === 0xffff || (words[5] === 0 && (words[6] !== 0 || words[7] > 1)));
  // IPv4-mapped and IPv4-compatible addresses never belong in an AAAA record; publish an A record instead.
  if (embedsIpv4) throw invalid(param, `"${value}" embeds an IPv4 address; publish it as an A record.`);
  return formatIpv6(words);
}

// ---- text ----------------------------------------------------------------------------------------

/** Reads zone-file character-strings (`"a b" "c\"d" "\195\169"`) into their bytes. */
function parseQuoted(value: string, param: string): Buffer[] {
  const out: Buffer[] = [];
  const bytes = Buffer.from(value.trim(), 'utf8');
  let i = 0;
  while (i < bytes.length) {
    if (bytes[i] === 0x20 || bytes[i] === 0x09) {
      i++;
      continue;
    }
    if (bytes[i] !== 0x22) throw invalid(param, 'quoted text must be a sequence of "..." strings separated by spaces.');
    i++;
    const chunk: number[] = [];
    let closed = false;
    while (i < bytes.length) {
      const c = bytes[i];
      if (c === 0x22) {
        closed = true;
        i++;
        break;
      }
      if (c === 0x5c) {
        const digits = bytes.subarray(i + 1, i + 4).toString('latin1');
        if (/^[0-9]{3}$/.test(digits)) {
          if (Number(digits) > 255) throw invalid(param, `"\\${digits}" is not a byte (\\000 to \\255).`);
          chunk.push(Number(digits));
          i += 4;
        } else if (i + 1 < bytes.length) {
          chunk.push(bytes[i + 1]);
          i += 2;
        } else {
          throw invalid(param, 'the text ends with a lone backslash.');
        }
        continue;
      }
      chunk.push(c);
      i++;
    }
    if (!closed) throw invalid(param, 'a quoted string is not closed.');
    out.push(Buffer.from(chunk));
  }
  if (out.length === 0) throw invalid(param, 'the text holds no quoted string.');
  return out;
}

/** One character-string in the server's form: printable ASCII as is, `"` and `\` escaped, other bytes as \DDD. */
function quoteBytes(bytes: Buffer): string {
  let s = '"';
  for (const b of bytes) {
    if (b === 0x22 || b === 0x5c) s += `\\${String.fromCharCode(b)}`;
    else if (b >= 0x20 && b < 0x7f) s += String.fromCharCode(b);
    else s += `\\${String(b).padStart(3, '0')}`;
  }
  return `${s}"`;
}

/** Strings of at most 255 bytes, cut between UTF-8 characters where the text allows it. */
function splitChunks(bytes: Buffer): Buffer[] {
  if (bytes.length === 0) return [bytes];
  const out: Buffer[] = [];
  let start = 0;
  while (start < bytes.length) {
    let end = Math.min(start + CHUNK_BYTES, bytes.length);
    if (end < bytes.length) {
      let cut = end;
      // Back off over continuation bytes (10xxxxxx) so a character is not split, unless nothing would remain.
      while (cut > start && (bytes[cut] & 0xc0) === 0x80) cut--;
      if (cut > start) end = cut;
    }
    out.push(bytes.subarray(start, end));
    start = end;
  }
  return out;
}

/**
 * TXT: plain text (`v=spf1 -all`) or zone-file quoted strings (`"part one" "part two"`). The result is
 * quoted, split into strings of at most 255 bytes (a longer quoted string is split too).
 */
function txt(value: string, param: string): string {
  const quoted = value.trimStart().startsWith('"');
  const pieces = quoted ? parseQuoted(value, param) : [Buffer.from(value, 'utf8')];
  const total = pieces.reduce((n, p) => n + p.length, 0);
  if (total > MAX_TEXT_BYTES) throw invalid(param, `the text is ${total} bytes; at most ${MAX_TEXT_BYTES} fit in one record.`);
  return pieces.flatMap(splitChunks).map(quoteBytes).join(' ');
}

/** The parts of a TXT value as text (for showing or comparing), the inverse of the quoting. */
export function txtStrings(canonical: string): string[] {
  return parseQuoted(canonical, 'value').map((b) => b.toString('utf8'));
}

// ---- structured types -----------------------------------------------------------------------------

function mx(value: string, param: string): string {
  const [pref, host] = fields(value, 2, param, '<preference> <host>');
  return `${uint(pref, 65535, param, 'the preference')} ${normalizeTarget(host, param, true)}`;
}

function srv(value: string, param: string): string {
  const [priority, weight, port, target] = fields(value, 4, param, '<priority> <weight> <port> <target>');
  return `${uint(priority, 65535, param, 'the priority')} ${uint(weight, 65535, param, 'the weight')} ${uint(port, 65535, param, 'the port')} ${normalizeTarget(target, param, true)}`;
}

const CAA_TAG = /^[a-z0-9]{1,15}$/;

/** CAA: `<flags> <tag> <value>`, e.g. `0 issue "letsencrypt.org"`; the value may come without quotes. */
function caa(value: string, param: string): string {
  const m = /^\s*(\S+)\s+(\S+)\s+(.*?)\s*$/.exec(value);
  if (!m) throw invalid(param, `expected "<flags> <tag> <value>" such as 0 issue "letsencrypt.org", got "${value}".`);
  const flags = uint(m[1], 255, param, 'the flags');
  const tag = m[2].toLowerCase();
  if (!CAA_TAG.test(tag)) throw invalid(param, `"${m[2]}" is not a CAA tag (issue, issuewild, iodef...).`);
  let bytes: Buffer;
  if (m[3].startsWith('"')) {
    const parts = parseQuoted(m[3], param);
    if (parts.length !== 1) throw invalid(param, 'a CAA value is one quoted string.');
    bytes = parts[0];
  } else {
    bytes = Buffer.from(m[3], 'utf8');
  }
  const text = bytes.toString('utf8');
  if (tag === 'iodef' && !/^(mailto:[^\s@]+@[^\s@]+|https?:\/\/\S+)$/i.test(text)) {
    throw invalid(param, `an iodef value is a mailto: or http(s): URL, not "${text}".`);
  }
  if ((tag === 'issue' || tag === 'issuewild') && !/^[A-Za-z0-9.-]*(\s*;.*)?$/.test(text)) {
    throw invalid(param, `an ${tag} value is a CA's domain (or empty), optionally followed by "; parameters", not "${text}".`);
  }
  return `${flags} ${tag} ${quoteBytes(bytes)}`;
}

const CANONICAL: Record<RRsetType, (value: string, param: string) => string> = {
  A: ipv4,
  AAAA: ipv6,
  CNAME: (v, p) => normalizeTarget(v, p),
  NS: (v, p) => normalizeTarget(v, p),
  PTR: (v, p) => normalizeTarget(v, p),
  MX: mx,
  TXT: txt,
  SRV: srv,
  CAA: caa,
};

/** One value of an RRset of `type`, checked and in canonical form; DnsValueError at `param` otherwise. */
export function canonicalValue(type: RRsetType, value: unknown, param: string): string {
  if (typeof value !== 'string') throw invalid(param, 'a value is a string.');
  if (type !== 'TXT' && value.trim() === '') throw invalid(param, 'a value cannot be empty.');
  return CANONICAL[type](value, param);
}
