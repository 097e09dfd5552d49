import { describe, expect, it } from 'vitest';
import { isDatabaseUnavailable } from '../db/errors';
import { backendUnavailable } from '../domain/errors';
import { mapError as mariadbError } from '../providers/dbinstances/mariadb.engine';
import { mapError as postgresError } from '../providers/dbinstances/postgresql.engine';
import { BackendUnavailableError } from '../providers/errors';

/**
 * A customer's database instance that does not answer is `503 backend_unavailable` naming that
 * instance, never "the control plane's database": its connection failures look like the control
 * plane's own (db/errors.ts), so the engines must map every one of them before the API sees it.
 */
const INSTANCE = 'svc-7-a1b2c3';
const failures: Array<[string, (err: unknown, instance: string) => Error, unknown]> = [
  ['postgresql: a client closed under the call', postgresError, new Error('Client was closed and is not queryable')],
  ['postgresql: connection failure (SQLSTATE 08006)', postgresError, Object.assign(new Error('connection failure'), { code: '08006' })],
  ['postgresql: host unreachable', postgresError, Object.assign(new Error('connect EHOSTUNREACH 127.77.0.9:5432'), { code: 'EHOSTUNREACH' })],
  ['postgresql: starting up', postgresError, Object.assign(new Error('the database system is starting up'), { code: '57P03' })],
  [
    'mariadb: connection cut',
    mariadbError,
    Object.assign(new Error('Connection lost: The server closed the connection.'), { code: 'PROTOCOL_CONNECTION_LOST' }),
  ],
  ['mariadb: refused', mariadbError, Object.assign(new Error('connect ECONNREFUSED /run/x.sock'), { code: 'ECONNREFUSED' })],
  ['mariadb: host unreachable', mariadbError, Object.assign(new Error('connect EHOSTUNREACH'), { code: 'EHOSTUNREACH' })],
  ['mariadb: a connection already closed', mariadbError, new Error("Can't add new command when connection is in closed state")],
];

describe('a DBaaS instance that does not answer', () => {
  it.each(failures)('%s: unavailable, naming the instance, not the control plane', (_, map, err) => {
    const mapped = map(err, INSTANCE);
    expect(mapped).toBeInstanceOf(BackendUnavailableError);
    expect(isDatabaseUnavailable(mapped)).toBe(false);
    const answer = backendUnavailable((mapped as BackendUnavailableError).backend, (mapped as BackendUnavailableError).subject);
    expect({ status: answer.status, code: answer.code, message: answer.message }).toEqual({
      status: 503,
      code: 'backend_unavailable',
      message: `The database instance ${INSTANCE} is not answering; try again shortly.`,
    });
  });

  it('keeps a failed query a plain error (500, logged), not an outage', () => {
    const mapped = postgresError(Object.assign(new Error('division by zero'), { code: '22012' }), INSTANCE);
    expect(mapped).not.toBeInstanceOf(BackendUnavailableError);
    expect(isDatabaseUnavailable(mapped)).toBe(false);
  });
});
