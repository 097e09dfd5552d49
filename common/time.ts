/** A timestamp as ISO 8601, or null. A string already in that form (from isoSql) is returned as it is. */
export const iso = (d: Date | string | null | undefined): string | null => {
  if (!d) return null;
  if (typeof d === 'string' && d.length === 24 && d[10] === 'T' && d[23] === 'Z') return d;
  return new Date(d).toISOString();
};

/** A DATE value as `YYYY-MM-DD`. DATE columns come back as local-midnight Dates: format them in local time to keep the day. */
export function dateOnly(value: Date | string | null): string | null {
  if (value === null) return null;
  if (typeof value === 'string') return value.slice(0, 10);
  const y = value.getFullYear();
  const m = String(value.getMonth() + 1).padStart(2, '0');
  const d = String(value.getDate()).padStart(2, '0');
  return `${y}-${m}-${d}`;
}
