import { randomBytes } from 'node:crypto';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import type { TypedSearchAttributes } from '@temporalio/common';
import { hostQueue } from '../common/hosts';
import type { Keyring } from '../common/crypto';
import type { TemporalGateway } from './temporal';
import { BackendUnavailableError } from '../providers/errors';
import { HOST_CALL_PURPOSE, type HostCallContent, type HostCaller, type HostCallRequest, type SealedHostCall } from '../providers/host-routing';
import { decodeError, decodeValue, encodeValue, type WireOutcome } from '../providers/host-wire';

/** The workflow a host runs for one call (workflows/hosts/host-call.workflow.ts), by name: infra does not import workflows. */
export const HOST_CALL_WORKFLOW = 'hostCallWorkflow';

/**
 * Runs a provider call on a resource's host through Temporal (docs/hosts.md "Synchronous calls"): a
 * `hostCallWorkflow` on the host's task queue, whose one local activity makes the call on the host's
 * own provider; the caller waits for its outcome. The workflow's id says what it is for in the
 * Temporal UI (`host-call-h2-lb.apply-svc_12-3f9a0c`), and its execution timeout bounds the wait: a
 * host that does not take the call in time fails it (503 at the API) and the call never runs late.
 */
export class TemporalHostCaller implements HostCaller {
  constructor(
    private readonly client: () => Client,
    private readonly options: {
      timeoutMs: number;
      /** Seals the call's arguments (some are passwords): `keyring.encrypt(HOST_CALL_PURPOSE, ...)`. */
      seal: (plaintext: string) => string;
      searchAttributes?: (request: HostCallRequest) => TypedSearchAttributes | undefined;
    },
  ) {}

  async call(host: string, request: HostCallRequest): Promise<unknown> {
    const workflowId = `host-call-${host}-${request.family}.${request.method}-svc_${request.serviceId}-${randomBytes(3).toString('hex')}`;
    const { args, ...call } = request;
    const content: HostCallContent = { ...call, args: args.map(encodeValue), expiresAt: Date.now() + this.options.timeoutMs };
    const input: SealedHostCall = { ...call, sealed: this.options.seal(JSON.stringify(content)), timeoutMs: this.options.timeoutMs };
    let outcome: WireOutcome;
    const noAnswer = `did not answer within ${this.options.timeoutMs} ms`;
    let timer: NodeJS.Timeout | undefined;
    try {
      // Bounded here too: a Temporal server that takes the start but never answers must not hold the request.
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(noAnswer)), this.options.timeoutMs + 2_000);
      });
      const execution = this.client().workflow.execute(HOST_CALL_WORKFLOW, {
        taskQueue: hostQueue(host),
        workflowId,
        args: [input],
        workflowExecutionTimeout: this.options.timeoutMs,
        typedSearchAttributes: this.options.searchAttributes?.(request),
      });
      execution.catch(() => undefined);
      outcome = await Promise.race([execution, late]);
    } catch (err) {
      const why = err instanceof WorkflowFailedError ? noAnswer : (err as Error).message;
      throw new BackendUnavailableError(request.family, `host ${host}: ${why}`);
    } finally {
      clearTimeout(timer);
    }
    if (outcome.ok) return decodeValue(outcome.value);
    throw decodeError(outcome.error);
  }
}

/** The caller of a process (the API, a worker) over its Temporal gateway: HOST_CALL_TIMEOUT, search attributes naming the service. */
export function hostCallerOf(temporal: TemporalGateway, timeoutMs: number, keyring: Keyring): TemporalHostCaller {
  return new TemporalHostCaller(() => temporal.client, {
    timeoutMs,
    seal: (plaintext) => keyring.encrypt(HOST_CALL_PURPOSE, plaintext),
    searchAttributes: (call) =>
      temporal.searchAttributes({ operationType: `host.${call.family}.${call.method}`, accountId: null, resourceId: `svc_${call.serviceId}` }),
  });
}
