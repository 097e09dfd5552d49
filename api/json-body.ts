/**
 * The bytes of JSON response bodies. A body marked reusable (the same object answered again and
 * again, such as a list page that has not changed: api/routes/services.routes.ts) is serialised
 * once and its bytes are written for every later answer. A reusable body must never be mutated.
 */
const reusableBytes = new WeakMap<object, Buffer | null>();

export function reusableBody<T extends object>(body: T): T {
  if (!reusableBytes.has(body)) reusableBytes.set(body, null);
  return body;
}

export function jsonBytes(body: unknown): Buffer {
  if (body === null || typeof body !== 'object') return Buffer.from(JSON.stringify(body));
  const held = reusableBytes.get(body);
  if (held) return held;
  const bytes = Buffer.from(JSON.stringify(body));
  if (held === null) reusableBytes.set(body, bytes);
  return bytes;
}
