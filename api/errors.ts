/**
 * The closed set of errors business code throws. One middleware (api/app.ts) turns them into the
 * spec's error envelope; anything else becomes a generic 500 that leaks nothing.
 */
export type ErrorType = 'authentication_error' | 'authorization_error' | 'invalid_request_error' | 'rate_limit_error' | 'api_error';

export interface FieldError {
  param: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export const authenticationRequired = () =>
  new ApiError(401, 'authentication_error', 'authentication_required', 'Send a credential as "Authorization: Bearer <token>".');

export const invalidApiKey = () => new ApiError(401, 'authentication_error', 'invalid_api_key', 'The credential is not valid.');

export const notFound = (what = 'resource') => new ApiError(404, 'invalid_request_error', 'not_found', `No such ${what}.`);

export const validationFailed = (errors: FieldError[], message?: string) =>
  new ApiError(
    400,
    'invalid_request_error',
    'validation_failed',
    message ?? (errors.length === 1 ? `${errors[0].param}: ${errors[0].message}` : 'The request has invalid fields.'),
    errors[0]?.param ?? null,
    { errors },
  );

export const insufficientScope = (scope: string) =>
  new ApiError(403, 'authorization_error', 'insufficient_scope', `This call needs the scope "${scope}".`, null, {
    required_scope: scope,
  });

export const forbidden = (code: string, message: string) => new ApiError(403, 'authorization_error', code, message);

export const conflict = (message: string, code = 'conflict') => new ApiError(409, 'invalid_request_error', code, message);

export const unsupportedForProduct = (capability: string) =>
  new ApiError(400, 'invalid_request_error', 'unsupported_for_product', `This product does not support "${capability}". This is permanent for this resource.`);

export const backendUnavailable = (family: string) =>
  new ApiError(503, 'api_error', 'backend_unavailable', `The ${family} backend is not answering; try again shortly.`);

/** PostgreSQL, which every answer of the API needs, is not answering. */
export const databaseUnavailable = () =>
  new ApiError(503, 'api_error', 'backend_unavailable', "The control plane's database is not answering; try again shortly.");

export const quotaExceeded = (message: string) => new ApiError(429, 'rate_limit_error', 'quota_exceeded', message);
