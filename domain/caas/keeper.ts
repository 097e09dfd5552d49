import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import type { Providers } from '../../providers';
import { databaseEnvOf } from './databases';
import { APP_RESOURCES } from './manage';
import { runEnvOf } from './runtime-env';
import { appRef, hostsOf, type AppRow } from './store';

/**
 * Keeps every live container service serving, beside the worker: at start (after a host restart,
 * or a local run's Ctrl-C, no router or container is left) and then every `intervalMs`. For each
 * service it starts (or adopts) the router; for each app with a serving deployment whose container
 * is gone, it starts one from the deployment's image with the app's variables of now and routes it.
 */
export class CaasKeeper extends PeriodicService {
  readonly name = 'caas-keeper';

  constructor(private readonly deps: { db: Knex; keyring: Keyring; providers: Providers; logger: Logger; intervalMs: number; startTimeoutMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    const { db, providers, logger } = this.deps;
    const services: Array<{ service_id: string }> = await db('caas_services as c')
      .join('services as s', 's.id', 'c.service_id')
      .whereIn('s.status', ['active', 'suspended', 'pending'])
      .select('c.service_id');
    for (const { service_id } of services) {
      const serviceId = Number(service_id);
      try {
        await providers.caas.ensureService(serviceId);
        // The forwarders to its database servers live in a process: this one's are made here.
        await databaseEnvOf({ db, keyring: this.deps.keyring, providers }, serviceId);
        const apps: AppRow[] = await db('caas_apps').where({ service_id: serviceId }).whereNotNull('current_deployment_id');
        for (const raw of apps) await this.keepApp({ ...raw, id: Number(raw.id), service_id: serviceId });
      } catch (err) {
        logger.warn({ service: `svc_${serviceId}`, err: (err as Error).message }, 'container service could not be brought back; next pass retries');
      }
    }
  }

  private async keepApp(app: AppRow): Promise<void> {
    const { db, keyring, providers } = this.deps;
    const deployment = app.current_deployment_id!;
    if (await providers.caas.isServing(app.service_id, appRef(app.id), deployment)) return;
    const started = await providers.caas.start(
      app.service_id,
      appRef(app.id),
      deployment,
      { env: await runEnvOf({ db, keyring, providers }, app), ...APP_RESOURCES },
      this.deps.startTimeoutMs,
    );
    if (started.state !== 'listening') {
      this.deps.logger.warn({ app: appRef(app.id), deployment, state: started.state }, 'an app could not be started again; next pass retries');
      return;
    }
    await providers.caas.route(app.service_id, appRef(app.id), await hostsOf(db, app), deployment);
    await db('caas_deployments').where({ id: deployment }).update({ host_port: started.hostPort });
  }
}
