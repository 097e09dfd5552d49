import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import { servicesAwaitingTeardown } from '../domain/services';
import type { TemporalGateway } from '../domain/temporal';
import type { BackgroundService } from './background';

/**
 * Starts a teardown workflow (`teardown-svc_<n>`) for every terminated service whose resources still
 * exist, every TEARDOWN_SWEEP_INTERVAL. Billing terminates services on its own clock (and the dev
 * stand-in at once); the sweep makes the teardown follow whichever way it happened, and survive
 * restarts: a service stays on the list until its teardown marks it done.
 */
export class TeardownSweeper implements BackgroundService {
  readonly name = 'teardown-sweeper';
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly deps: { db: Db; config: Config; logger: Logger; temporal: TemporalGateway }) {}

  async start(): Promise<void> {
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.sweep());
    }, this.deps.config.TEARDOWN_SWEEP_INTERVAL);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  async sweep(): Promise<void> {
    try {
      for (const { id: serviceId, accountId } of await servicesAwaitingTeardown(this.deps.db)) {
        const resourceId = `svc_${serviceId}`;
        try {
          await this.deps.temporal.client.workflow.start('serviceTeardownWorkflow', {
            workflowId: `teardown-${resourceId}`,
            taskQueue: this.deps.temporal.taskQueue,
            args: [{ serviceId }],
            typedSearchAttributes: this.deps.temporal.searchAttributes({ operationType: 'services.teardown', accountId: `cus_${accountId}`, resourceId }),
            memo: { operation_type: 'services.teardown', account: `cus_${accountId}`, resource: `service ${resourceId}` },
          });
        } catch (err) {
          if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        }
      }
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'teardown sweep failed; next pass retries');
    }
  }
}
