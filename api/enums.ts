import { z } from 'zod';

/**
 * A string field that takes one of `values`, declared as an enum in the OpenAPI document (so the
 * document is no looser than the validator), refused with the API's own message: `refusal(value)`
 * for a string that is not one of them; any other type gets zod's usual "expected string".
 */
export function enumField<const T extends readonly [string, ...string[]]>(values: T, refusal: (value: string) => string) {
  return z.enum(values, {
    error: (issue) => (typeof issue.input === 'string' ? refusal(issue.input) : z.string().safeParse(issue.input).error?.issues[0]?.message),
  });
}
