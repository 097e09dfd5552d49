import type { Express, NextFunction, Request, Response } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AnyRoute } from '../api/route';
import type { AppDeps } from '../api/deps';
import { ApiError } from '../api/errors';
import { clientIp, forwardedClientHeader } from '../api/client-address';
import { ApiClient } from '../client/api-client';
import { clientRoutes } from '../client/from-route-table';
import { createMcpServer } from './server';
import { allTools } from './tools';

/**
 * Streamable HTTP at `POST /mcp` on the API server, stateless: every request carries its Bearer
 * credential, which is checked before anything else and decides the tool list. Tool calls go to
 * this same server over HTTP (the address the request arrived on), through the whole /v1 pipeline.
 */
const READ_ONLY_HEADER = 'cloud-mcp-read-only';

/** The address this connection reached, as a base URL for calls back into this server. */
function selfUrl(req: Request): string {
  let host = req.socket.localAddress ?? '127.0.0.1';
  if (host.startsWith('::ffff:')) host = host.slice(7);
  if (host === '::' || host === '0.0.0.0') host = '127.0.0.1';
  return `http://${host.includes(':') ? `[${host}]` : host}:${req.socket.localPort}`;
}

function bearer(header: string | undefined): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match ? match[1] : null;
}

export function mountMcp(app: Express, deps: AppDeps, table: AnyRoute[], version: string): void {
  const routes = clientRoutes(table);
  // Builds every tool once now, so a route the tools cannot express stops the server at start.
  allTools(routes);
  app.post('/mcp', (req: Request, res: Response, next: NextFunction) => {
    handle(req, res).catch(next);
  });
  app.all('/mcp', (_req: Request, res: Response, next: NextFunction) => {
    res.setHeader('Allow', 'POST');
    next(new ApiError(405, 'invalid_request_error', 'method_not_allowed', 'This MCP endpoint is stateless: send every message with POST.'));
  });

  async function handle(req: Request, res: Response): Promise<void> {
    const principal = await deps.credentials.authenticate(req.headers.authorization);
    const readOnly = String(req.headers[READ_ONLY_HEADER] ?? '').toLowerCase() === 'true';
    const client = clientIp(req);
    const api = new ApiClient({
      baseUrl: selfUrl(req),
      token: bearer(req.headers.authorization),
      channel: 'mcp',
      userAgent: 'cloud-mcp-http',
      // The tool calls' audit entries name the MCP client, not this server's own address.
      headers: client ? forwardedClientHeader(deps.keyring, client) : undefined,
    });
    const server = createMcpServer({
      routes,
      api,
      readOnly,
      version,
      credential: async () => ({ type: principal.type, scopes: principal.scopes }),
    });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  }
}
