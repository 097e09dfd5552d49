import type { Knex } from 'knex';
import { familyInfo } from '../../common/families';
import type { BuildStatus, BuildTarget, ServiceBuildProvider } from '../builds.provider';
import { simulatedDelay } from '../switchboard';
import type { SimulatedTasks } from './task-engine';

/**
 * Builds on the shared task engine: one `build` task per service whose duration is the family's
 * `simulatedBuildMs × SIM_DELAY_SCALE` (common/families.ts); ready once it has settled.
 */
export class BuildSimulator implements ServiceBuildProvider {
  constructor(
    private readonly db: Knex,
    private readonly tasks: SimulatedTasks,
  ) {}

  async startBuild(target: BuildTarget): Promise<void> {
    await simulatedDelay(200, this.tasks.scale);
    const info = familyInfo(target.productFamily);
    await this.tasks.enqueue({
      backend: target.productFamily,
      subject: target.serviceId,
      kind: 'build',
      key: `provision:${target.serviceId}`,
      durationMs: info?.simulatedBuildMs ?? 10_000,
      // Simulated services get their address from the documentation range TEST-NET-2.
      params: { primary_ip: info?.hasAddress ? `198.51.100.${(target.serviceId % 250) + 1}` : null },
      id: () => `build-${target.serviceId}`,
    });
  }

  async buildStatus(target: BuildTarget): Promise<BuildStatus> {
    await this.tasks.settle(target.productFamily, target.serviceId, async () => undefined);
    const task = await this.tasks.byKey(`provision:${target.serviceId}`);
    if (!task || task.status !== 'ok') return { ready: false, primaryIp: null };
    return { ready: true, primaryIp: (task.params.primary_ip as string | null) ?? null };
  }

  async destroy(target: BuildTarget): Promise<void> {
    await this.db.transaction(async (trx) => {
      await this.tasks.lock(trx, target.productFamily, target.serviceId);
      await this.tasks.forget(target.productFamily, target.serviceId, trx);
    });
  }
}
