import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { bookkeeping, calls, HYPERVISOR, powerTo, waits } from './steps';

export interface VpsReinstallInput extends OperationInput {
  serviceId: number;
  vmid: number;
  /** A template id of GET /v1/vps/{id}/templates. The root password is not here: it waits sealed, keyed by operation id. */
  template: string;
}

/** Progress at the start of each stage. */
const STAGES = { provision: 5, boot: 60, health_check: 85 } as const;
type Stage = keyof typeof STAGES;

/**
 * `vps.reinstall`: provision (the hypervisor wipes the disk and installs the template with the
 * root password), wait for boot (start, until the guest answers), health check (running, guest up,
 * same addresses). The VPS is flagged `reinstalling` from the request's transaction until the end;
 * the flag is cleared before the operation's final state is recorded, success or failure.
 */
export async function vpsReinstallWorkflow(input: VpsReinstallInput): Promise<void> {
  const stageResult = (stage: Stage) => ({ stage, template: input.template }) as Record<string, unknown>;
  await runOperation(
    input,
    {
      backend: HYPERVISOR,
      step: 'provision',
      progress: STAGES.provision,
      result: stageResult('provision'),
      failedResult: (run) => stageResult(run.currentStep as Stage),
      cleanup: () => bookkeeping.vpsEndReinstall({ operationId: input.operationId, serviceId: input.serviceId }),
    },
    async (run) => {
      /** A stage: its progress and `result.stage` are recorded as it starts (provision's with `running`). */
      const stage = <T>(name: Stage, fn: () => Promise<T>) => run.step(name, name === 'provision' ? null : STAGES[name], fn, { result: stageResult(name) });

      const addresses = await stage('provision', async () => {
        const addresses = await calls.vpsReadAddresses({ vmid: input.vmid });
        const task = await calls.vpsBeginReinstall({
          operationId: input.operationId,
          vmid: input.vmid,
          template: input.template,
          key: `${input.operationId}:reinstall`,
        });
        await run.tracker.progress(15);
        const provisioned = await waits.vpsAwaitTask({ upid: task.upid });
        if (provisioned.status === 'error') throw new StepFailed('provision', `the reinstall task failed: ${provisioned.error ?? 'no detail'}`);
        return addresses;
      });

      await stage('boot', async () => {
        await powerTo(input.vmid, 'start', `${input.operationId}:start`, 'boot');
        await run.tracker.progress(70);
        await waits.vpsAwaitGuest({ vmid: input.vmid });
      });

      await stage('health_check', async () => {
        const health = await calls.vpsHealthCheck({ vmid: input.vmid, ...addresses });
        if (!health.ok) throw new StepFailed('health_check', health.detail);
      });
      return { stage: 'done', template: input.template, ipv4: addresses.ipv4, ipv6: addresses.ipv6 };
    },
  );
}
