/**
 * Output of the CLI. `json` is the API's body exactly as received (the one exception: `--all`
 * joins the pages into one list envelope). `table` is for a person: a list as rows, one object as
 * field/value pairs, nested values flattened (`cpu.cores`), sized to the terminal.
 */
export type OutputFormat = 'table' | 'json';

export interface Writer {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

const ELLIPSIS = '…';

function cell(value: unknown): string {
  if (value === null || value === undefined) return '-';
  if (typeof value === 'string') return value.replace(/[\r\n\t]+/g, ' ');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function truncate(text: string, width: number): string {
  if (text.length <= width) return text;
  return width <= 1 ? text.slice(0, width) : `${text.slice(0, width - 1)}${ELLIPSIS}`;
}

/** `{cpu: {cores: 2}}` -> `{'cpu.cores': 2}`; arrays stay whole. */
export function flatten(value: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    const entries = Object.entries(value);
    if (entries.length === 0 && prefix) out[prefix] = value;
    for (const [key, item] of entries) flatten(item, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out[prefix || 'value'] = value;
  }
  return out;
}

/**
 * Columns that fit `width`: each keeps its natural width while the total fits; otherwise the widest
 * are narrowed (to 10 characters, or its header, at least), then columns are dropped from the right.
 */
export function renderRows(headers: string[], rows: string[][], width: number): { lines: string[]; dropped: number } {
  const gap = 2;
  let count = headers.length;
  const natural = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const least = natural.map((n, i) => Math.min(n, Math.max(10, headers[i].length)));
  let widths = natural.slice(0, count);
  const total = () => widths.reduce((a, b) => a + b, 0) + gap * (widths.length - 1);
  for (;;) {
    widths = natural.slice(0, count);
    while (total() > width) {
      const slack = widths.map((w, i) => w - least[i]);
      const widest = slack.indexOf(Math.max(...slack));
      if (slack[widest] <= 0) break;
      widths[widest] -= 1;
    }
    if (total() <= width || count === 1) break;
    count -= 1;
  }
  const line = (values: string[]) =>
    values
      .slice(0, count)
      .map((v, i) => (i === count - 1 ? truncate(v, widths[i]) : truncate(v, widths[i]).padEnd(widths[i])))
      .join(' '.repeat(gap))
      .trimEnd();
  return { lines: [line(headers.map((h) => h.toUpperCase())), ...rows.map(line)], dropped: headers.length - count };
}

function isListEnvelope(body: unknown): body is { object: 'list'; data: unknown[]; has_more?: boolean } {
  return Boolean(body && typeof body === 'object' && (body as { object?: unknown }).object === 'list' && Array.isArray((body as { data?: unknown }).data));
}

export function formatTable(body: unknown, width: number): string {
  if (isListEnvelope(body)) {
    if (body.data.length === 0) return '(no items)\n';
    const flat = body.data.map((item) => {
      const f: Record<string, unknown> = item && typeof item === 'object' && !Array.isArray(item) ? { ...item } : { value: item };
      delete f.object;
      return f;
    });
    // Scalars first, in the API's order; nested values (shown as JSON) after them.
    const all = [...new Set(flat.flatMap((f) => Object.keys(f)))];
    const nested = (h: string) => flat.some((f) => f[h] !== null && typeof f[h] === 'object');
    const headers = [...all.filter((h) => !nested(h)), ...all.filter(nested)];
    const { lines, dropped } = renderRows(
      headers,
      flat.map((f) => headers.map((h) => cell(f[h]))),
      width,
    );
    const notes = [];
    if (dropped) notes.push(`${dropped} more column${dropped > 1 ? 's' : ''}: widen the terminal or use -o json`);
    if (body.has_more) notes.push('more items: --all fetches every page');
    return `${lines.join('\n')}\n${notes.map((n) => `(${n})\n`).join('')}`;
  }
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const flat = flatten(body);
    const keyWidth = Math.max(...Object.keys(flat).map((k) => k.length));
    return Object.entries(flat)
      .map(([k, v]) => `${k.padEnd(keyWidth)}  ${truncate(cell(v), Math.max(8, width - keyWidth - 2))}`.trimEnd())
      .join('\n')
      .concat('\n');
  }
  if (Array.isArray(body)) return formatTable({ object: 'list', data: body.map((v) => (v && typeof v === 'object' ? v : { value: v })) }, width);
  return `${cell(body)}\n`;
}

/**
 * Writes an API answer. `text` is the raw body: with `json` (or a body that is not JSON, such as a
 * zone file) it goes out byte for byte, with a final newline only for a terminal.
 */
export function writeBody(out: Writer, format: OutputFormat, text: string, json: unknown): void {
  if (text === '') return;
  if (format === 'json' || json === undefined) {
    out.write(text);
    if (out.isTTY && !text.endsWith('\n')) out.write('\n');
    return;
  }
  out.write(formatTable(json, terminalWidth(out)));
}

/** The terminal's width; `COLUMNS` when not writing to a terminal; else 100. */
export function terminalWidth(out: Writer, env: NodeJS.ProcessEnv = process.env): number {
  if (out.isTTY && out.columns && out.columns > 20) return out.columns;
  const columns = Number(env.COLUMNS);
  return Number.isInteger(columns) && columns > 20 ? columns : 100;
}
