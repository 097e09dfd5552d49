import { DomainError, type ErrorType } from '../domain/errors';

/**
 * Errors of the HTTP layer itself (a body that is not JSON, a method a path does not have, a rate
 * limit with its Retry-After), and the one mapping of the domain's errors (domain/errors.ts) to
 * HTTP: a domain error keeps its code, status and fields, and may gain response headers here.
 */
export class ApiError extends DomainError {
  constructor(
    status: number,
    type: ErrorType,
    code: string,
    message: string,
    param: string | null = null,
    extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(status, type, code, message, param, extra);
  }

  static from(err: DomainError): ApiError {
    return err instanceof ApiError ? err : new ApiError(err.status, err.type, err.code, err.message, err.param, err.extra);
  }
}

/** PostgreSQL, which every answer of the API needs, is not answering. */
export const databaseUnavailable = () =>
  new ApiError(503, 'api_error', 'backend_unavailable', "The control plane's database is not answering; try again shortly.");
