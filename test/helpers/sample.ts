import { z } from 'zod';

type JsonSchema = Record<string, any>;

/**
 * A minimal valid value for a zod schema (through its JSON Schema): required fields only, the
 * first enum value, the smallest allowed sizes. Used by the tests generated from the route table.
 */
export function sampleOf(schema: z.ZodType): unknown {
  return sampleJson(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema);
}

function sampleJson(s: JsonSchema): unknown {
  if (s.examples?.length) return s.examples[0];
  if (s.example !== undefined) return s.example;
  if (s.default !== undefined) return s.default;
  if (s.const !== undefined) return s.const;
  if (Array.isArray(s.enum)) return s.enum[0];
  for (const key of ['anyOf', 'oneOf'] as const) if (Array.isArray(s[key])) return sampleJson(s[key][0]);
  if (Array.isArray(s.allOf)) return Object.assign({}, ...s.allOf.map((part: JsonSchema) => sampleJson(part)));
  const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== 'null') : s.type;
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const name of s.required ?? []) out[name] = sampleJson(s.properties?.[name] ?? {});
      return out;
    }
    case 'array':
      return Array.from({ length: s.minItems ?? 0 }, () => sampleJson(s.items ?? {}));
    case 'string':
      if (s.format === 'date-time') return new Date(Date.now() + 86_400_000).toISOString();
      if (s.format === 'email') return 'someone@example.test';
      if (s.format === 'uri' || s.format === 'url') return 'https://example.test/';
      return 'x'.repeat(Math.max(1, s.minLength ?? 1));
    case 'integer':
    case 'number':
      return s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 1);
    case 'boolean':
      return true;
    case 'null':
      return null;
    default:
      return {};
  }
}
