import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { iso } from '../../common/time';
import { APP_RESOURCES } from '../../domain/caas/manage';
import { runEnvOf } from '../../domain/caas/runtime-env';
import { fetchSource, SourceError } from '../../domain/caas/source';
import { addLog, appById, appRef, findDeployment, hostsOf, type DeploymentRow, type DeploymentStatus } from '../../domain/caas/store';
import type { Providers } from '../../providers';
import { heartbeating } from '../backend-errors';

export interface DeploymentIds {
  serviceId: number;
  appId: number;
  deploymentId: string;
}

/** `{object: "caas_deployment", ...}` (DECISIONS "CaaS"), as the API and an operation's result show it. */
export interface DeploymentView {
  object: 'caas_deployment';
  id: string;
  app_id: string;
  status: DeploymentStatus;
  source_sha256: string | null;
  error_code: string | null;
  created_at: string;
  finished_at: string | null;
}

export const presentDeployment = (d: DeploymentRow): DeploymentView => ({
  object: 'caas_deployment',
  id: d.id,
  app_id: appRef(d.app_id),
  status: d.status,
  source_sha256: d.source_sha256,
  error_code: d.error_code,
  created_at: iso(d.created_at)!,
  finished_at: iso(d.finished_at),
});

type StepOutcome = { ok: true } | { ok: false; message: string };

/** The container apps' deploy steps (workflows/caas/caas-deploy.workflow.ts); each idempotent by the deployment's id. */
export function createCaasActivities({ db, keyring, config, providers }: { db: Knex; keyring: Keyring; config: Config; providers: Providers }) {
  const caas = providers.caas;
  const workDir = (deploymentId: string) => path.join(config.CAAS_DATA_DIR, 'builds', deploymentId);
  const policy = { allowInsecure: config.WEBHOOK_ALLOW_INSECURE_TARGETS };

  async function deployment(id: string): Promise<DeploymentRow> {
    const row = await findDeployment(db, id);
    if (!row) throw new Error(`deployment ${id} is gone`);
    return row;
  }

  return {
    async caasDeploymentView(ids: DeploymentIds): Promise<DeploymentView> {
      return presentDeployment(await deployment(ids.deploymentId));
    },

    /** Downloads and unpacks the app's source into the deployment's work directory (made afresh on a retry). */
    async caasFetchSource(ids: DeploymentIds): Promise<StepOutcome> {
      const app = await appById(db, ids.appId);
      if (!app?.source) return { ok: false, message: 'The app has no source to deploy.' };
      await db('caas_deployments').where({ id: ids.deploymentId }).update({ status: 'building' });
      await addLog(db, ids.appId, ids.deploymentId, 'platform', [`deployment ${ids.deploymentId}: fetching ${app.source.url}`]);
      const dir = workDir(ids.deploymentId);
      await rm(dir, { recursive: true, force: true });
      try {
        const fetched = await heartbeating(() => fetchSource(app.source!.url, dir, { policy }));
        await db('caas_deployments').where({ id: ids.deploymentId }).update({ source_sha256: fetched.sha256 });
        await addLog(db, ids.appId, ids.deploymentId, 'platform', [`source fetched: ${fetched.bytes} bytes, ${fetched.files} files, sha256 ${fetched.sha256}`]);
        return { ok: true };
      } catch (err) {
        if (!(err instanceof SourceError)) throw err;
        await rm(dir, { recursive: true, force: true });
        await addLog(db, ids.appId, ids.deploymentId, 'platform', [`the source could not be used: ${err.message}`]);
        return { ok: false, message: `The source archive could not be used: ${err.message}` };
      }
    },

    /** Builds the image; its output goes to the app's build log (replaced on a retry). */
    async caasBuild(ids: DeploymentIds): Promise<StepOutcome> {
      const dir = workDir(ids.deploymentId);
      const built = await heartbeating(() => caas.build(ids.serviceId, appRef(ids.appId), ids.deploymentId, dir));
      await db('caas_logs').where({ deployment_id: ids.deploymentId, source: 'build' }).delete();
      await addLog(db, ids.appId, ids.deploymentId, 'build', built.log.slice(-500));
      await rm(dir, { recursive: true, force: true });
      return built.ok ? { ok: true } : { ok: false, message: 'The build failed; its output is in the app’s logs (source "build").' };
    },

    /** Starts the container with the app's variables of now and waits until it listens on `$PORT`. */
    async caasStart(ids: DeploymentIds): Promise<StepOutcome> {
      await db('caas_deployments').where({ id: ids.deploymentId }).update({ status: 'starting' });
      const app = await appById(db, ids.appId);
      if (!app) throw new Error(`app ${ids.appId} is gone`);
      const env = await runEnvOf({ db, keyring, providers }, app);
      const started = await heartbeating(() =>
        caas.start(ids.serviceId, appRef(ids.appId), ids.deploymentId, { env, ...APP_RESOURCES }, config.CAAS_START_TIMEOUT),
      );
      if (started.state === 'listening') {
        await db('caas_deployments').where({ id: ids.deploymentId }).update({ host_port: started.hostPort });
        return { ok: true };
      }
      await addLog(db, ids.appId, ids.deploymentId, 'platform', [
        started.state === 'exited'
          ? `the app exited${started.exitCode === null ? '' : ` with code ${started.exitCode}`} before listening on $PORT`
          : `the app did not listen on $PORT within ${Math.round(config.CAAS_START_TIMEOUT / 1000)} s`,
        ...started.output.slice(-50).map((line) => `app: ${line}`),
      ]);
      await caas.stop(ids.serviceId, appRef(ids.appId), ids.deploymentId);
      return {
        ok: false,
        message:
          started.state === 'exited' ? 'The app exited before it listened on $PORT; see its logs.' : 'The app did not listen on $PORT in time; see its logs.',
      };
    },

    /** Switches the app's host names to the deployment, then stops the one it replaces. */
    async caasPromote(ids: DeploymentIds): Promise<DeploymentView> {
      const app = await appById(db, ids.appId);
      if (!app) throw new Error(`app ${ids.appId} is gone`);
      const previous = app.current_deployment_id && app.current_deployment_id !== ids.deploymentId ? app.current_deployment_id : null;
      await caas.route(ids.serviceId, appRef(app.id), await hostsOf(db, app), ids.deploymentId);
      await db.transaction(async (trx) => {
        if (previous) await trx('caas_deployments').where({ id: previous }).update({ status: 'superseded' });
        await trx('caas_deployments').where({ id: ids.deploymentId }).update({ status: 'active', finished_at: trx.fn.now() });
        await trx('caas_apps').where({ id: app.id }).update({ status: 'running', current_deployment_id: ids.deploymentId, updated_at: trx.fn.now() });
      });
      if (previous) await caas.stop(ids.serviceId, appRef(app.id), previous);
      await addLog(db, app.id, ids.deploymentId, 'platform', [`deployment ${ids.deploymentId} is serving${previous ? `; ${previous} stopped` : ''}`]);
      return presentDeployment(await deployment(ids.deploymentId));
    },

    /** Records the failure (the previous deployment, if any, serves on). Idempotent. */
    async caasFailDeployment(input: DeploymentIds & { code: string; message: string }): Promise<DeploymentView> {
      await db.transaction(async (trx) => {
        const updated = await trx('caas_deployments')
          .where({ id: input.deploymentId })
          .whereIn('status', ['pending', 'building', 'starting'])
          .update({ status: 'failed', error_code: input.code, error_message: input.message, finished_at: trx.fn.now() });
        if (updated) {
          await trx('caas_apps').where({ id: input.appId }).whereNull('current_deployment_id').update({ status: 'failed', updated_at: trx.fn.now() });
          await trx('caas_apps').where({ id: input.appId }).whereNotNull('current_deployment_id').update({ status: 'running', updated_at: trx.fn.now() });
          await addLog(trx, input.appId, input.deploymentId, 'platform', [`deployment ${input.deploymentId} failed (${input.code}): ${input.message}`]);
        }
      });
      await rm(workDir(input.deploymentId), { recursive: true, force: true });
      return presentDeployment(await deployment(input.deploymentId));
    },
  };
}

export type CaasActivities = ReturnType<typeof createCaasActivities>;
