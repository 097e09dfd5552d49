import type { Request } from 'express';
import type { Principal } from '../domain/principal';
import { clientIp, forwardedClient } from './client-address';
import type { AppDeps } from './deps';
import { DomainError } from '../domain/errors';
import { ApiError } from './errors';

/**
 * The address a request's credential failures count against: the client's, or for a tool call the
 * MCP endpoint makes to this server, the MCP client's it names (never this server's own address).
 */
function failureAddress(deps: AppDeps, req: Request): string | null {
  return forwardedClient(deps.keyring, req) ?? clientIp(req);
}

const tooManyFailures = (seconds: number) =>
  new ApiError(
    429,
    'rate_limit_error',
    'rate_limited',
    `Too many requests with a credential that is not valid from this network address; retry in ${seconds} s.`,
    null,
    { retry_after: seconds },
    { 'Retry-After': String(seconds) },
  );

/**
 * Authenticates the request's Bearer credential (for /v1 and /mcp alike). A token that is no
 * credential at all (`invalid_api_key`: what a guess gets) counts like a failed sign-in against the
 * client address (LOGIN_MAX_ATTEMPTS_PER_IP per LOGIN_THROTTLE_WINDOW, domain/login-throttle.ts);
 * past the limit such guesses get `429` until the window ends. Valid credentials from that address
 * keep working: unlike a password, a token has ~190 random bits, so telling a hit from a miss gives a
 * guesser nothing, while refusing every client behind a shared address (a NAT, a CI provider) would
 * let one guesser lock them all out. Missing, expired and revoked credentials are not guesses and
 * do not count. A valid request costs nothing here.
 */
export async function authenticateRequest(deps: AppDeps, req: Request): Promise<Principal> {
  try {
    return await deps.credentials.authenticate(req.headers.authorization);
  } catch (err) {
    if (err instanceof DomainError && err.code === 'invalid_api_key') {
      const address = failureAddress(deps, req);
      const wait = deps.loginThrottle.blockedFor(address);
      if (wait > 0) throw tooManyFailures(wait);
      const verdict = await deps.loginThrottle.failedCredential(address);
      if (!verdict.allowed) throw tooManyFailures(verdict.retryAfterSeconds);
    }
    throw err;
  }
}
