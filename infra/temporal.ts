import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType, TypedSearchAttributes } from '@temporalio/common';
import type { Config } from '../common/config';

/**
 * Custom search attributes that make each run legible (and filterable) in the Temporal UI:
 * `CloudOperationType = "vps.reinstall" AND CloudResourceId = "svc_12"`.
 */
export const SEARCH_ATTRIBUTES = {
  operationType: defineSearchAttributeKey('CloudOperationType', SearchAttributeType.KEYWORD),
  accountId: defineSearchAttributeKey('CloudAccountId', SearchAttributeType.KEYWORD),
  resourceId: defineSearchAttributeKey('CloudResourceId', SearchAttributeType.KEYWORD),
};

/** `--search-attribute` arguments for `temporal server start-dev`. */
export const DEV_SERVER_SEARCH_ATTRIBUTE_ARGS = Object.values(SEARCH_ATTRIBUTES).flatMap((k) => ['--search-attribute', `${k.name}=Keyword`]);

export interface TemporalOptions {
  address: string;
  namespace: string;
  taskQueue: string;
  useSearchAttributes: boolean;
}

/** A process's Temporal options from its configuration (`taskQueue`: another queue than TEMPORAL_TASK_QUEUE, for a test or bench worker). */
export function temporalOptionsOf(
  config: Pick<Config, 'TEMPORAL_ADDRESS' | 'TEMPORAL_NAMESPACE' | 'TEMPORAL_TASK_QUEUE' | 'TEMPORAL_SEARCH_ATTRIBUTES'>,
  taskQueue: string = config.TEMPORAL_TASK_QUEUE,
): TemporalOptions {
  return { address: config.TEMPORAL_ADDRESS, namespace: config.TEMPORAL_NAMESPACE, taskQueue, useSearchAttributes: config.TEMPORAL_SEARCH_ATTRIBUTES };
}

/**
 * The API's view of Temporal: a lazily connected client, so that the API starts (and serves
 * stored state) while Temporal is still coming up or is down.
 */
export class TemporalGateway {
  private clientInstance: Client | null = null;
  private readonly connection: Connection;

  constructor(
    readonly options: TemporalOptions,
    client?: Client,
  ) {
    this.connection = (client?.connection as Connection | undefined) ?? Connection.lazy({ address: options.address });
    if (client) this.clientInstance = client;
  }

  get client(): Client {
    this.clientInstance ??= new Client({ connection: this.connection, namespace: this.options.namespace });
    return this.clientInstance;
  }

  get taskQueue(): string {
    return this.options.taskQueue;
  }

  searchAttributes(values: { operationType: string; accountId: string | null; resourceId: string | null }): TypedSearchAttributes | undefined {
    if (!this.options.useSearchAttributes) return undefined;
    const pairs = [
      { key: SEARCH_ATTRIBUTES.operationType, value: values.operationType },
      ...(values.accountId ? [{ key: SEARCH_ATTRIBUTES.accountId, value: values.accountId }] : []),
      ...(values.resourceId ? [{ key: SEARCH_ATTRIBUTES.resourceId, value: values.resourceId }] : []),
    ];
    return new TypedSearchAttributes(pairs);
  }

  handle(workflowId: string): WorkflowHandle {
    return this.client.workflow.getHandle(workflowId);
  }

  /** Runs a client call with a deadline; rejects when Temporal does not answer in time. */
  withDeadline<T>(ms: number, fn: () => Promise<T>): Promise<T> {
    return this.connection.withDeadline(Date.now() + ms, fn);
  }

  async close(): Promise<void> {
    await this.connection.close().catch(() => undefined);
  }
}
