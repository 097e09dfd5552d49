/**
 * Durations in configuration are written like `30m`, `10s`, `1500ms`, `12h`, `2d`.
 * Parsed once at start-up into milliseconds so that workflows receive plain numbers.
 */
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(text);
  if (!match) throw new Error(`invalid duration "${text}" (expected e.g. 1500ms, 10s, 30m, 12h, 2d)`);
  return Math.round(Number(match[1]) * UNIT_MS[match[2]]);
}

export function parseDurationList(text: string): number[] {
  return text.split(',').map((part) => parseDuration(part));
}
