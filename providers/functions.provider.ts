/**
 * The functions primitive's runtime (SPEC "Serverless", DECISIONS "Serverless": functions, modelled
 * on Cloudflare Workers): a tenant deploys named functions, each an ES module
 * `export default { fetch(request, env) }`, and the data plane proxies invocations to them.
 *
 * The real engine is workerd under bubblewrap, one sandboxed process per tenant
 * (providers/workerd/runtime.ts, docs/research/serverless-backends.md section 3). The data plane
 * (dataplane/serverless/functions.ts) keeps the modules in PostgreSQL and gives them back with
 * `restore` after a restart; the runtime itself keeps nothing across restarts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { BackendGoneError, BackendRefusedError } from './errors';

/** Function names: they become file names and capnp service names, so nothing but these characters. */
export const FUNCTION_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** Tenant handles, made by the control plane (the kv store's rule): lower-case letters and digits. */
export const FUNCTIONS_TENANT_PATTERN = /^[a-z0-9]{1,32}$/;

export interface InvocationResult {
  /** The status the caller received (504 for the wall-time limit, 499 when the caller went away first). */
  status: number;
  /** An uncaught exception (or the process failing, or the time limit), not a 5xx the function returned deliberately. */
  errored: boolean;
  /** Wall time from the start of the request to the end of the answer. */
  ms: number;
}

export interface FunctionsRuntime {
  /**
   * Makes `name` serve `code` for the tenant (a new process with the tenant's whole set); resolves
   * once it serves. Throws ScriptInvalidError (the loader's message, without host paths) and keeps
   * the old code serving.
   */
  deploy(tenant: string, name: string, code: string): Promise<void>;
  /** true when it existed. */
  remove(tenant: string, name: string): Promise<boolean>;
  /** After a restart of the data plane: the tenant's functions as stored (starts its process). */
  restore(tenant: string, functions: Array<{ name: string; code: string }>): Promise<void>;
  has(tenant: string, name: string): boolean;
  /**
   * Proxies the request to the function (method, path + query given as `path`, headers minus
   * hop-by-hop and `authorization`, streamed body) and streams the answer into `res`. Throws
   * FunctionMissingError (nothing written to `res`) when the tenant has no such function.
   */
  invoke(tenant: string, name: string, path: string, req: IncomingMessage, res: ServerResponse): Promise<InvocationResult>;
  dropTenant(tenant: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * The module does not load (syntax error, an exception at the top level, no `fetch` handler, an
 * import of a module that is not there). The message is the loader's, naming the function and the
 * line, written for the customer who deployed it. A refusal for the provider error mapping (400 on
 * the body when it reaches the API).
 */
export class ScriptInvalidError extends BackendRefusedError {
  constructor(message: string) {
    super('functions', message, 'script_invalid', 'body');
    this.name = 'ScriptInvalidError';
  }
}

/** The tenant has no function of that name (never deployed, removed, or the tenant dropped): the caller answers 404. */
export class FunctionMissingError extends BackendGoneError {
  constructor(readonly functionName: string) {
    super('functions', `function ${functionName}`, 'no such function');
    this.name = 'FunctionMissingError';
  }
}

/**
 * A tenant or function name that breaks the rules above. The data plane checks names before they
 * reach the runtime (and answers 400 in its own words); one that reaches it anyway is a bug, so the
 * runtime refuses rather than putting it in a path or a config. The message names the rule, not the value.
 */
export class FunctionNameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FunctionNameError';
  }
}

export function checkFunctionName(name: string): void {
  if (typeof name !== 'string' || !FUNCTION_NAME_PATTERN.test(name)) {
    throw new FunctionNameError('a function name is 1 to 63 lower-case letters, digits or hyphens, starting with a letter or digit');
  }
}

export function checkFunctionsTenant(tenant: string): void {
  if (typeof tenant !== 'string' || !FUNCTIONS_TENANT_PATTERN.test(tenant))
    throw new FunctionNameError('a functions tenant is 1 to 32 lower-case letters or digits');
}
