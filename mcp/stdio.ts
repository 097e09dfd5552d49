import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { ClientRoute } from '../client/client-routes';
import { errorOf, type ApiClient } from '../client/api-client';
import { createMcpServer } from './server';
import type { CredentialView } from './tools';

/**
 * `cloud mcp`: the MCP server on stdin/stdout for a local agent, with the CLI's credential. The
 * tool list follows what the API reports about that credential (`GET /v1/account/credential`),
 * read again at most every few seconds so a narrowed or revoked key shows.
 */
const CREDENTIAL_TTL_MS = 5_000;

export function credentialFromApi(api: ApiClient): () => Promise<CredentialView | null> {
  let cached: { at: number; value: CredentialView | null } | null = null;
  return async () => {
    if (cached && Date.now() - cached.at < CREDENTIAL_TTL_MS) return cached.value;
    if (!api.hasToken) return null;
    const res = await api.request({ method: 'GET', url: '/v1/account/credential' });
    if (!res.ok) {
      const error = errorOf(res);
      throw new McpError(
        ErrorCode.InternalError,
        `The API refused the credential: ${error ? `${error.type}/${error.code}: ${error.message}` : `HTTP ${res.status}`}`,
      );
    }
    const body = res.json as { type: 'api_key' | 'session'; scopes: string[] };
    cached = { at: Date.now(), value: { type: body.type, scopes: body.scopes } };
    return cached.value;
  };
}

export async function runStdioServer(options: { routes: ClientRoute[]; api: ApiClient; readOnly: boolean; version: string }): Promise<void> {
  const server = createMcpServer({ ...options, credential: credentialFromApi(options.api) });
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
