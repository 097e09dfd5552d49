import type { Express, NextFunction, Request, Response } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AnyRoute } from '../api/route';
import type { AppDeps } from '../api/deps';
import { isIP } from 'node:net';
import { forbidden } from '../domain/errors';
import { ApiError } from '../api/errors';
import { authenticateRequest } from '../api/authenticate';
import { clientIp, forwardedClientHeader, isLoopback } from '../api/client-address';
import { parseOrigin } from '../common/config';
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

/**
 * A `Host` header as the URL parser writes it: `host` with the port (lower case, default port
 * dropped) and `name` without it and without IPv6 brackets. Null when it is not a bare host[:port].
 */
function parseHost(header: string): { host: string; name: string } | null {
  if (/[\s/\\@?#]/.test(header)) return null;
  try {
    const url = new URL(`http://${header}/`);
    return { host: url.host, name: url.hostname.replace(/^\[(.*)\]$/, '$1') };
  } catch {
    return null;
  }
}

/**
 * What the MCP Streamable HTTP specification asks of a server against DNS rebinding: a page of
 * `http://evil.example:3000`, whose name the attacker then points at 127.0.0.1, would otherwise
 * reach this server from the victim's browser as if it were on the same origin.
 * - On a loopback connection the `Host` must be a name this server serves: an IP address (no DNS
 *   to rebind), `localhost`, or the host of an origin in MCP_ALLOWED_ORIGINS.
 * - An `Origin`, when sent (browsers do; the CLI, SDK clients and curl do not), must be this
 *   server's own (the origin the `Host` names) or one of MCP_ALLOWED_ORIGINS.
 * Both refusals are `403` in the API's error envelope, before the credential is looked at.
 */
export function checkBrowserContext(req: Request, allowedOrigins: readonly string[]): void {
  const host = req.headers.host === undefined ? undefined : parseHost(req.headers.host);
  let local = req.socket.localAddress ?? null;
  if (local?.startsWith('::ffff:')) local = local.slice(7);
  if (host !== undefined && isLoopback(local)) {
    const served =
      host !== null &&
      (isIP(host.name) !== 0 || host.name === 'localhost' || allowedOrigins.some((origin) => parseHost(new URL(origin).host)?.name === host.name));
    if (!served) throw forbidden('host_not_allowed', 'This server does not serve the host named in the Host header.');
  }
  const origin = req.headers.origin;
  if (origin === undefined) return;
  const normalised = parseOrigin(origin);
  const sameOrigin = normalised !== null && host != null && new URL(normalised).host === host.host;
  if (!normalised || !(sameOrigin || allowedOrigins.includes(normalised))) {
    throw forbidden('origin_not_allowed', 'Requests from this browser origin are not allowed; add it to MCP_ALLOWED_ORIGINS to allow it.');
  }
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
    checkBrowserContext(req, deps.config.MCP_ALLOWED_ORIGINS);
    // A guessed token counts against the client address like a failed sign-in, as on /v1.
    const principal = await authenticateRequest(deps, req);
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
