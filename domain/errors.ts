/**
 * The closed set of errors business code throws: what went wrong, in the spec's vocabulary (its
 * error codes and the status each code has, SPEC "Errors"). The domain never sees HTTP; one
 * middleware (api/app.ts) maps these to the error envelope, and anything else to a generic 500
 * that leaks nothing.
 */
export type ErrorType = 'authentication_error' | 'authorization_error' | 'invalid_request_error' | 'rate_limit_error' | 'api_error';

export interface FieldError {
  param: string;
  message: string;
}

export class DomainError extends Error {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export const authenticationRequired = () =>
  new DomainError(401, 'authentication_error', 'authentication_required', 'Send a credential as "Authorization: Bearer <token>".');

export const invalidApiKey = () => new DomainError(401, 'authentication_error', 'invalid_api_key', 'The credential is not valid.');

export const notFound = (what = 'resource') => new DomainError(404, 'invalid_request_error', 'not_found', `No such ${what}.`);

export const validationFailed = (errors: FieldError[], message?: string) =>
  new DomainError(
    400,
    'invalid_request_error',
    'validation_failed',
    message ?? (errors.length === 1 ? `${errors[0].param}: ${errors[0].message}` : 'The request has invalid fields.'),
    errors[0]?.param ?? null,
    { errors },
  );

export const insufficientScope = (scope: string) =>
  new DomainError(403, 'authorization_error', 'insufficient_scope', `This call needs the scope "${scope}".`, null, {
    required_scope: scope,
  });

export const forbidden = (code: string, message: string) => new DomainError(403, 'authorization_error', code, message);

export const conflict = (message: string, code = 'conflict') => new DomainError(409, 'invalid_request_error', code, message);

export const unsupportedForProduct = (capability: string) =>
  new DomainError(
    400,
    'invalid_request_error',
    'unsupported_for_product',
    `This product does not support "${capability}". This is permanent for this resource.`,
  );

/** `subject` names what did not answer when it is the customer's own (a database instance). */
export const backendUnavailable = (family: string, subject?: string) =>
  new DomainError(503, 'api_error', 'backend_unavailable', `The ${subject ?? `${family} backend`} is not answering; try again shortly.`);

export const quotaExceeded = (message: string) => new DomainError(429, 'rate_limit_error', 'quota_exceeded', message);
