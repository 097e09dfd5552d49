import { isCancellation, proxyActivities } from '@temporalio/workflow';
import type { CaasActivities, DeploymentView } from '../../activities/caas/activities';
import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';

export interface CaasDeployInput extends OperationInput {
  serviceId: number;
  appId: number;
  deploymentId: string;
}

/** Named in failure messages ("The container platform did not complete this step: ..."). */
export const CAAS_BACKEND = 'container platform';

/**
 * Each step heartbeats while it works (a fetch, a build, a start can take minutes), so a worker
 * lost mid-step is noticed in seconds and the step runs again on another worker; every step is
 * idempotent by the deployment's id (its work directory, image tag and container name).
 */
const steps = proxyActivities<CaasActivities>({
  startToCloseTimeout: '20 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 5 },
});
const bookkeeping = proxyActivities<CaasActivities>({ startToCloseTimeout: '1 minute', retry: { initialInterval: '1 second', maximumInterval: '30 seconds' } });

/**
 * `caas.deploy` (SPEC "CaaS", DECISIONS "CaaS"): fetch the app's source archive, build an image
 * tagged with the deployment's id, start its container, wait until it listens on `$PORT`, switch
 * the app's Host names to it, stop the one it replaces. A failed fetch, build or start ends the
 * operation `failed` with `source_unavailable`, `build_failed` or `start_failed`, keeps the previous
 * deployment serving, and leaves the reason in the app's logs. `result.deployment` is the deployment.
 */
export async function caasDeployWorkflow(input: CaasDeployInput): Promise<void> {
  const ids = { serviceId: input.serviceId, appId: input.appId, deploymentId: input.deploymentId };
  const initial: { deployment: DeploymentView | null } = { deployment: null };
  await runOperation(input, { backend: CAAS_BACKEND, step: 'fetch', result: initial }, async (run) => {
    try {
      run.result = { deployment: await bookkeeping.caasDeploymentView(ids) };
      const fetched = await run.step('fetch', 10, () => steps.caasFetchSource(ids));
      if (!fetched.ok) throw new StepFailed('fetch', fetched.message, 'source_unavailable');
      const built = await run.step('build', 30, () => steps.caasBuild(ids));
      if (!built.ok) throw new StepFailed('build', built.message, 'build_failed');
      const started = await run.step('start', 70, () => steps.caasStart(ids));
      if (!started.ok) throw new StepFailed('start', started.message, 'start_failed');
      const deployment = await run.step('switch', 90, () => steps.caasPromote(ids));
      return { deployment };
    } catch (err) {
      // A cancelled run is closed by the kit (and the orphan sweeper's release fails the deployment).
      if (isCancellation(err)) throw err;
      const code = err instanceof StepFailed ? err.code : 'upstream_error';
      const message = err instanceof Error ? err.message : String(err);
      run.result = { deployment: await bookkeeping.caasFailDeployment({ ...ids, code, message }) };
      throw err;
    }
  });
}
