import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import type { CaasLogLine, CaasMachine, CaasProvider, CaasRunSpec, CaasServiceSpace, CaasStartOutcome } from '../caas.provider';
import { simulatedDelay } from '../switchboard';

/**
 * The CaaS simulator: the same contract as podman + HAProxy, its state in PostgreSQL
 * (`sim_caas_deployments`, `sim_caas_routes`), work that takes a little time, and nothing run. A
 * source builds when it has a `Containerfile` or a `package.json` at its root; a deployment "listens"
 * unless its `package.json` start script calls `exit` (a stand-in for an app that exits at once).
 * Its ingress is not served (there is no container to reach).
 */
export class CaasSimulator implements CaasProvider {
  constructor(
    private readonly db: Knex,
    private readonly scale: number,
  ) {}

  private delay(ms: number) {
    return simulatedDelay(ms, this.scale);
  }

  async ensureService(serviceId: number): Promise<CaasServiceSpace> {
    await this.delay(50);
    return { ip: '127.0.0.1', ingressUrl: `http://127.0.0.1:${20_000 + (serviceId % 10_000)}` };
  }

  async machine(serviceId: number): Promise<CaasMachine> {
    const [{ n }] = await this.db('sim_caas_deployments').where({ service_id: serviceId, state: 'running' }).count({ n: '*' });
    return { cpuCores: 1, memoryBytes: 1024 ** 3, appsRunning: Number(n) };
  }

  async destroyService(serviceId: number): Promise<void> {
    await this.db('sim_caas_deployments').where({ service_id: serviceId }).delete();
    await this.db('sim_caas_routes').where({ service_id: serviceId }).delete();
  }

  async build(serviceId: number, appId: string, deploymentId: string, sourceDir: string): Promise<{ ok: boolean; log: string[] }> {
    await this.delay(200);
    const ok = existsSync(path.join(sourceDir, 'Containerfile')) || existsSync(path.join(sourceDir, 'package.json'));
    const exits = ok && /\bexit\b/.test(startScriptOf(sourceDir));
    await this.db('sim_caas_deployments')
      .insert({ deployment_id: deploymentId, service_id: serviceId, app: appId, state: exits ? 'built-exits' : 'built' })
      .onConflict('deployment_id')
      .merge();
    return ok
      ? { ok, log: [`building ${deploymentId} (simulated)`, 'build complete'] }
      : { ok, log: ['error: the source has neither a Containerfile nor a package.json at its root'] };
  }

  async start(serviceId: number, appId: string, deploymentId: string, spec: CaasRunSpec): Promise<CaasStartOutcome> {
    await this.delay(200);
    const built = await this.db('sim_caas_deployments').where({ deployment_id: deploymentId }).first();
    const fails = built?.state === 'built-exits';
    await this.db('sim_caas_deployments')
      .insert({
        deployment_id: deploymentId,
        service_id: serviceId,
        app: appId,
        state: fails ? 'exited' : 'running',
        env: JSON.stringify(Object.keys(spec.env)),
        started_at: this.db.fn.now(),
      })
      .onConflict('deployment_id')
      .merge();
    return fails ? { state: 'exited', exitCode: 1, output: ['the app exited (simulated)'] } : { state: 'listening', hostPort: 0 };
  }

  async route(serviceId: number, appId: string, hosts: string[], deploymentId: string | null): Promise<void> {
    await this.delay(20);
    await this.db('sim_caas_routes')
      .insert({ service_id: serviceId, app: appId, hosts, deployment_id: deploymentId })
      .onConflict(['service_id', 'app'])
      .merge();
  }

  async isServing(_serviceId: number, _appId: string, deploymentId: string): Promise<boolean> {
    return (await this.db('sim_caas_deployments').where({ deployment_id: deploymentId }).first())?.state === 'running';
  }

  async stop(_serviceId: number, _appId: string, deploymentId: string): Promise<void> {
    await this.db('sim_caas_deployments').where({ deployment_id: deploymentId }).update({ state: 'stopped' });
  }

  async logs(_serviceId: number, _appId: string, deploymentId: string, lines: number): Promise<CaasLogLine[]> {
    const row = await this.db('sim_caas_deployments').where({ deployment_id: deploymentId }).first();
    if (!row?.started_at) return [];
    return [{ timestamp: new Date(row.started_at).toISOString(), message: `listening on $PORT (simulated ${deploymentId})` }].slice(-lines);
  }

  async reachable(_serviceId: number, target: { host: string; port: number }): Promise<{ host: string; port: number }> {
    return target;
  }

  async removeApp(serviceId: number, appId: string): Promise<void> {
    await this.db('sim_caas_deployments').where({ service_id: serviceId, app: appId }).delete();
    await this.db('sim_caas_routes').where({ service_id: serviceId, app: appId }).delete();
  }
}

function startScriptOf(dir: string): string {
  try {
    const manifest = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { scripts?: { start?: unknown } };
    return typeof manifest.scripts?.start === 'string' ? manifest.scripts.start : '';
  } catch {
    return '';
  }
}
