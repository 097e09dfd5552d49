import { cp, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import { APP_RESOURCES } from '../../domain/caas/manage';
import { CaasProvisioner } from '../../domain/caas/provisioner';
import { runEnvOf } from '../../domain/caas/runtime-env';
import { addLog, appRef, hostsOf, type AppRow } from '../../domain/caas/store';
import { LIVE_STATUSES } from '../../domain/per-account';
import type { Providers } from '../../providers';

/** The demo app's source, in the repository; `npm start` also serves it as a .tar.gz (its source URL). */
export const CAAS_SAMPLE_DIR = path.join(__dirname, 'caas-sample');
export const CAAS_SAMPLE_PATH = '/caas-sample.tar.gz';

/**
 * Every live container service gets its space (router, network) as an order would build it, and the
 * demo account's first one an app `hello` deployed from the sample (db/seeds/caas-sample), running:
 * built and started here as the deploy workflow would, from the repository's copy (the worker is not
 * up yet), with its source URL the copy `npm start` serves for later deploys. Idempotent: an app
 * with a serving deployment is left alone (the worker's keeper starts its container again).
 */
export async function seedCaas(db: Knex, providers: Providers, keyring: Keyring, config: Config, sampleUrl: string | null): Promise<void> {
  const provisioner = new CaasProvisioner(db, providers);
  const services: Array<{ id: number; account_id: number; product: string }> = await db('services')
    .where({ family: 'caas' })
    .whereIn('status', [...LIVE_STATUSES])
    .orderBy('id');
  for (const s of services) {
    const target = {
      id: Number(s.id),
      accountId: Number(s.account_id),
      family: 'caas',
      productFamily: 'caas',
      product: s.product,
      label: null,
      options: {},
      billingCycle: null,
    };
    await provisioner.provision(target);
  }
  const demo = services.find((s) => Number(s.account_id) === 1);
  if (!demo || !sampleUrl) return;
  const serviceId = Number(demo.id);
  await db('caas_apps')
    .insert({
      service_id: serviceId,
      name: 'hello',
      source: JSON.stringify({ type: 'archive', url: sampleUrl }),
      default_host: `hello-${serviceId}.${config.CAAS_APPS_DOMAIN}`,
    })
    .onConflict(['service_id', 'name'])
    .merge(['source']);
  const raw = await db('caas_apps').where({ service_id: serviceId, name: 'hello' }).first();
  const app: AppRow = { ...raw, id: Number(raw.id), service_id: serviceId };
  if (app.current_deployment_id) return;
  const deploymentId = newUlidId('dep');
  await db('caas_deployments').insert({ id: deploymentId, app_id: app.id, service_id: serviceId, status: 'building' });
  const work = path.join(config.CAAS_DATA_DIR, 'builds', deploymentId);
  try {
    await mkdir(path.dirname(work), { recursive: true });
    await cp(CAAS_SAMPLE_DIR, work, { recursive: true });
    const built = await providers.caas.build(serviceId, appRef(app.id), deploymentId, work);
    await addLog(db, app.id, deploymentId, 'build', built.log.slice(-200));
    if (!built.ok) throw new Error('the sample app did not build');
    const started = await providers.caas.start(
      serviceId,
      appRef(app.id),
      deploymentId,
      { env: await runEnvOf({ db, keyring, providers }, app), ...APP_RESOURCES },
      config.CAAS_START_TIMEOUT,
    );
    if (started.state !== 'listening') throw new Error(`the sample app did not start (${started.state})`);
    await providers.caas.route(serviceId, appRef(app.id), await hostsOf(db, app), deploymentId);
    await db('caas_deployments').where({ id: deploymentId }).update({ status: 'active', host_port: started.hostPort, finished_at: db.fn.now() });
    await db('caas_apps').where({ id: app.id }).update({ status: 'running', current_deployment_id: deploymentId, updated_at: db.fn.now() });
    await addLog(db, app.id, deploymentId, 'platform', [`deployment ${deploymentId} is serving (seeded)`]);
  } catch (err) {
    await db('caas_deployments')
      .where({ id: deploymentId })
      .update({ status: 'failed', error_code: 'start_failed', error_message: (err as Error).message, finished_at: db.fn.now() });
    await db('caas_apps').where({ id: app.id }).whereNull('current_deployment_id').update({ status: 'failed' });
    throw err;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
