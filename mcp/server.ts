import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { NetworkError, type ApiClient, type ApiResponse } from '../client/api-client';
import { waitForOperation } from '../client/operations';
import { buildRequest, MissingPathParameterError, type ClientRoute } from '../client/client-routes';
import { allTools, toolsFor, WAIT_MAX_SECONDS, WAIT_TOOL_NAME, type CredentialView, type ToolDef } from './tools';

/**
 * One MCP server over either transport. Each tool call is an HTTP request to the API's /v1 route
 * (so authentication, scopes, rate limits, idempotency and the audit log apply as to any client),
 * sent with `Cloud-Channel: mcp`. Validation is the API's: input it refuses comes back as a tool
 * result with `isError` and the API's error envelope, never as a protocol error.
 */
export interface McpServerOptions {
  routes: ClientRoute[];
  api: ApiClient;
  /** What the API says about the credential, for `tools/list`. */
  credential: () => Promise<CredentialView | null>;
  readOnly: boolean;
  version: string;
}

export const INSTRUCTIONS = [
  'Tools of the Cloud control-plane API: one per /v1 route, named after its operationId. Each tool description gives the scope it needs and its marks:',
  'R reversible, D destructive (cannot be undone), A asynchronous (answers with an operation), I idempotent.',
  `After a tool marked A, call ${WAIT_TOOL_NAME} with the operation id to learn the outcome.`,
  'Errors come back as results with isError and the API error envelope {error: {type, code, message, param, request_id}}.',
].join(' ');

type JsonObject = Record<string, unknown>;

const isObject = (value: unknown): value is JsonObject => Boolean(value) && typeof value === 'object' && !Array.isArray(value);

/** The API's answer as a tool result: the body as structured content and the same JSON as text. */
export function toToolResult(res: ApiResponse): CallToolResult {
  const text = res.text !== '' ? res.text : JSON.stringify({ status: res.status });
  return {
    content: [{ type: 'text', text }],
    ...(isObject(res.json) ? { structuredContent: res.json } : {}),
    ...(res.ok ? {} : { isError: true }),
  };
}

/** An error the server answers itself (before any API call), in the API's envelope. */
function localError(code: string, message: string, param: string | null = null, type = 'invalid_request_error'): CallToolResult {
  const envelope = {
    error: { type, code, message, param, request_id: null, ...(code === 'validation_failed' && param ? { errors: [{ param, message }] } : {}) },
  };
  return { content: [{ type: 'text', text: JSON.stringify(envelope) }], structuredContent: envelope, isError: true };
}

function networkResult(err: NetworkError): CallToolResult {
  return localError('api_unreachable', err.message, null, 'api_error');
}

async function callRoute(api: ApiClient, tool: ToolDef, args: JsonObject): Promise<CallToolResult> {
  const route = tool.route!;
  const { wholeBody } = route.inputs;
  const { body, ...named } = args;
  let plan;
  try {
    plan = wholeBody ? buildRequest(route, named, body) : buildRequest(route, args);
  } catch (err) {
    if (err instanceof MissingPathParameterError) return localError('validation_failed', `${err.param}: required`, err.param);
    throw err;
  }
  try {
    const res = await api.request({ method: plan.method, url: plan.url, body: plan.body, replaySafe: !route.returnsSecret });
    return toToolResult(res);
  } catch (err) {
    if (err instanceof NetworkError) return networkResult(err);
    throw err;
  }
}

export function createMcpServer(options: McpServerOptions): McpServer {
  const mcp = new McpServer(
    { name: 'cloud', title: 'Cloud control-plane API', version: options.version },
    { capabilities: { tools: { listChanged: false } }, instructions: INSTRUCTIONS },
  );
  const byName = new Map(allTools(options.routes).map((tool) => [tool.name, tool]));

  mcp.server.setRequestHandler(ListToolsRequestSchema, async () => {
    const credential = await options.credential();
    return {
      tools: toolsFor(options.routes, credential, options.readOnly).map(({ name, title, description, inputSchema, annotations }) => ({
        name,
        title,
        description,
        inputSchema,
        annotations,
      })),
    };
  });

  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = byName.get(request.params.name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    const args = (request.params.arguments ?? {}) as JsonObject;
    if (options.readOnly && tool.route && tool.route.method !== 'get') {
      return localError('read_only', `This MCP server is read-only; ${tool.name} changes things and is not available.`, null, 'authorization_error');
    }
    if (tool.name !== WAIT_TOOL_NAME) return callRoute(options.api, tool, args);

    const id = args.id;
    const timeout = args.timeout_seconds ?? 30;
    if (typeof id !== 'string' || id.length === 0) return localError('validation_failed', 'id: an operation id is required', 'id');
    if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > WAIT_MAX_SECONDS) {
      return localError('validation_failed', `timeout_seconds: must be an integer from 1 to ${WAIT_MAX_SECONDS}`, 'timeout_seconds');
    }
    const progressToken = request.params._meta?.progressToken;
    // Notifications in order, all sent before the result: a client stops listening for progress once it has the result.
    let notified: Promise<void> = Promise.resolve();
    try {
      const outcome = await waitForOperation(options.api, id, {
        timeoutMs: timeout * 1000,
        signal: extra.signal,
        onState: (op) => {
          if (progressToken === undefined) return;
          notified = notified
            .then(() =>
              extra.sendNotification({
                method: 'notifications/progress',
                params: { progressToken, progress: op.progress ?? 0, total: 100, message: `${op.type} ${op.status}` },
              }),
            )
            .catch(() => undefined);
        },
      });
      await notified;
      if (outcome.kind === 'error') return toToolResult(outcome.response);
      if (outcome.kind === 'done') return toToolResult(outcome.response);
      if (!outcome.response) return localError('timeout', `No state of ${id} could be read within ${timeout} s.`, null, 'api_error');
      const result = toToolResult(outcome.response);
      result.content.push({ type: 'text', text: `Still ${outcome.operation?.status} after ${timeout} s; call ${WAIT_TOOL_NAME} again to keep waiting.` });
      return result;
    } catch (err) {
      if (err instanceof NetworkError) return networkResult(err);
      throw err;
    }
  });

  return mcp;
}
