import { z } from 'zod';
import { formatId } from '../../common/ids';
import { hashPassword, needsRehash, sha256Hex, verifyPassword } from '../../common/crypto';
import { newSessionToken } from '../../domain/credentials';
import { DomainError } from '../../domain/errors';
import { ApiError } from '../errors';
import { defineRoute } from '../route';
import { clientIp } from '../client-address';
import { SessionSchema } from '../schemas';

// Verified when the email is unknown, so both failures take the same time.
let dummyHash: Promise<string> | null = null;

const invalidCredentials = () => new DomainError(401, 'authentication_error', 'invalid_credentials', 'The email or password is not correct.');

export const sessionRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/sessions',
    operationId: 'createSession',
    summary: 'Sign in with email and password',
    description:
      "Returns a session token (`cloud_sess_...`) valid for 12 hours. The same 401 answers an unknown email and a wrong password. Attempts are throttled per email address and per client address across all API processes (`429 rate_limited` with `Retry-After`); a successful sign-in clears its email's count.",
    tag: 'Sessions',
    scope: null,
    credential: 'none',
    marks: [],
    returnsSecret: true,
    body: z.object({ email: z.string().min(1).max(320), password: z.string().min(1).max(1024) }),
    responses: [{ status: 201, description: 'Signed in', schema: SessionSchema }],
    async handler({ body, deps, req }) {
      const ip = clientIp(req);
      const verdict = await deps.loginThrottle.attempt(body.email, ip);
      if (!verdict.allowed) {
        throw new ApiError(
          429,
          'rate_limit_error',
          'rate_limited',
          `Too many sign-in attempts for this email address or from this network address; retry in ${verdict.retryAfterSeconds} s.`,
          null,
          { retry_after: verdict.retryAfterSeconds },
          { 'Retry-After': String(verdict.retryAfterSeconds) },
        );
      }
      const user = await deps.db('users').whereRaw('lower(email) = lower(?)', [body.email]).first();
      dummyHash ??= hashPassword('not the password of anyone');
      const ok = await verifyPassword(body.password, user?.password_hash ?? (await dummyHash));
      if (!user || !ok) throw invalidCredentials();
      await deps.loginThrottle.succeeded(body.email, ip);
      // A hash made with older (weaker) parameters is replaced while the password is at hand.
      if (needsRehash(user.password_hash))
        await deps
          .db('users')
          .where({ id: user.id })
          .update({ password_hash: await hashPassword(body.password) });
      const token = newSessionToken();
      const expiresAt = new Date(Date.now() + deps.config.SESSION_TTL);
      await deps.db('sessions').insert({ token_hash: sha256Hex(token), user_id: user.id, account_id: user.account_id, expires_at: expiresAt });
      return {
        status: 201,
        body: {
          object: 'session' as const,
          token,
          expires_at: expiresAt.toISOString(),
          user: { id: formatId('usr', user.id), email: user.email, is_owner: user.is_owner },
        },
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/sessions/current',
    operationId: 'deleteCurrentSession',
    summary: 'Sign out (end the session in use)',
    tag: 'Sessions',
    scope: null,
    credential: 'session',
    marks: [],
    responses: [{ status: 204, description: 'The session has ended' }],
    async handler({ principal, deps }) {
      await deps
        .db('sessions')
        .where({ id: Number(principal.credentialId.slice(4)) })
        .update({ ended_at: deps.db.fn.now() });
      deps.credentials.invalidate();
      return { status: 204 };
    },
  }),
];
