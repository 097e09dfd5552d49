import pino from 'pino';

/**
 * One logger for every process. Secrets must never reach it; the redact list is a second line of
 * defence for fields that carry them, in case one is ever logged by mistake.
 */
export const REDACTED_FIELDS = [
  'password',
  'root_password',
  'token',
  'secret',
  'file',
  'authorization',
  '*.password',
  '*.root_password',
  '*.token',
  '*.secret',
  '*.file',
  '*.authorization',
  'req.headers.authorization',
  'headers.authorization',
];

/** `destination` defaults to standard output; tests pass a stream to read what was logged. */
export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info', name = 'cloud', destination?: pino.DestinationStream) {
  const options = { name, level, redact: { paths: REDACTED_FIELDS, censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}

export type Logger = ReturnType<typeof createLogger>;
