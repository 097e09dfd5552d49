import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { PeriodicService } from '../common/periodic';
import type { Db } from '../db/knex';
import { servicesAwaitingTeardown } from '../domain/services';
import type { TemporalGateway } from '../infra/temporal';
import type { BackgroundService } from './background';

/**
 * Starts a teardown workflow (`teardown-svc_<n>`) for every terminated service whose resources still
 * exist, every TEARDOWN_SWEEP_INTERVAL. Billing terminates services on its own clock (and the dev
 * stand-in at once); the sweep makes the teardown follow whichever way it happened, and survive
 * restarts: a service stays on the list until its teardown marks it done.
 */
export class TeardownSweeper extends PeriodicService implements BackgroundService {
  readonly name = 'teardown-sweeper';

  constructor(private readonly deps: { db: Db; config: Config; logger: Logger; temporal: TemporalGateway }) {
    super({ intervalMs: deps.config.TEARDOWN_SWEEP_INTERVAL });
  }

  protected pass() {
    return this.sweep();
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
