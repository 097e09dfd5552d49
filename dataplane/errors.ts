import type http from 'node:http';

/**
 * What the project's data planes (dataplane/images, dataplane/mail) share: an error that carries
 * its answer, the `/v1` error envelope they answer with (DECISIONS "Data planes and outbound
 * fetches": every answer carries `X-Request-Id`, errors as `/v1` with it as `request_id`), and a
 * bounded read of a request body.
 */
export class DataPlaneError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/** Answers `error` in the `/v1` envelope (`no-store`), unless the answer's head is already out. */
export function sendError(res: http.ServerResponse, error: DataPlaneError, requestId: string): void {
  if (!res.headersSent) {
    res.statusCode = error.status;
    res.setHeader('X-Request-Id', requestId);
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('Cache-Control', 'no-store');
  }
  res.end(errorBody(error, requestId));
}

/** The `/v1` error envelope of `error`, as JSON text. */
export function errorBody(error: DataPlaneError, requestId: string): string {
  return JSON.stringify({ error: { type: error.type, code: error.code, message: error.message, param: error.param, request_id: requestId } });
}

/** The request's body, refused with `413 payload_too_large` past `maxBytes`. */
export async function readBody(req: http.IncomingMessage, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new DataPlaneError(413, 'invalid_request_error', 'payload_too_large', `The body is over ${Math.round(maxBytes / 1024)} KiB.`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}
