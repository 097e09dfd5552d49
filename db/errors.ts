/**
 * Whether an error means a database server did not answer (down, restarting, unreachable,
 * connection cut), as opposed to a query that failed. Shared by the control plane's own database
 * (isDatabaseUnavailable) and the DBaaS engines, which turn such a failure of a customer's instance
 * into a BackendUnavailableError naming it before it can be taken for the control plane's.
 */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
// SQLSTATE class 08 (connection exception), 57P01..57P03 (shutdown, crash, cannot connect now), 53300 (too many connections).
const SQLSTATES = new Set(['08000', '08001', '08003', '08004', '08006', '57P01', '57P02', '57P03', '53300']);
const MESSAGES = [/Connection terminated/i, /not queryable/i, /Knex: Timeout acquiring a connection/i, /the database system is (starting up|shutting down)/i];

export function isConnectionFailure(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, name, message } = e as { code?: unknown; name?: unknown; message?: unknown };
    if (typeof code === 'string' && (CONNECTION_CODES.has(code) || SQLSTATES.has(code))) return true;
    if (name === 'KnexTimeoutError') return true;
    if (typeof message === 'string' && MESSAGES.some((re) => re.test(message))) return true;
    // AggregateError of a connection attempt on several addresses (localhost: ::1 and 127.0.0.1).
    const errors = (e as { errors?: unknown[] }).errors;
    if (Array.isArray(errors) && errors.length > 0 && errors.every((inner) => isConnectionFailure(inner))) return true;
  }
  return false;
}

/**
 * The control plane's PostgreSQL did not answer: the API answers `503 backend_unavailable` naming
 * it, never 500. Only errors of its own connections get here: a provider maps its servers' failures.
 */
export const isDatabaseUnavailable = isConnectionFailure;
