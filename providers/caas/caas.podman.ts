import { existsSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BackendUnavailableError } from '../errors';
import { HostRouter } from '../haproxy/host-router';
import { freeLoopbackPort } from '../local-server';
import { PodmanEngine } from '../podman/engine';
import { Forwarders } from './forwarder';
import type { CaasLogLine, CaasMachine, CaasProvider, CaasRunSpec, CaasServiceSpace, CaasStartOutcome } from '../caas.provider';

/** The port apps listen on inside their containers (`$PORT`, set by the control plane). */
const APP_PORT = 8080;
/** Each service's user range: uid 0..65535 of its containers are `base .. base+65535` on the host. */
const UID_BASE = 200_000;
const UID_RANGES = 60_000;

export interface CaasPodmanOptions {
  /** podman's storage (`podman/`), the services' routers (`services/svc-<n>/router`). */
  dataDir: string;
  /** Where the routers listen (each service's `ip`). */
  bindAddress: string;
  /** Address ranges containers may never reach (the platform's: balancers, database instances). */
  blockedRanges: string[];
  /** The range the services' networks are taken from (a /24 each). */
  subnetPool?: string;
}

interface Container {
  name: string;
  state: string;
  labels: Record<string, string>;
}

/**
 * Container apps on this host (docs/caas.md): podman (rootful, runc, hardened containers, one
 * network and one user range per service, the isolation rules of providers/podman/isolation.ts)
 * and one HAProxy per service that serves its apps by Host (providers/haproxy/host-router.ts).
 *
 * A deployment's image is `localhost/caas-app/<app>:<deployment>`; each start of it (the deploy's,
 * each restart's) is a container of its own, `caas-<app>-<deployment>-<generation>`, published on a
 * loopback port recorded in its labels. Routing a deployment points the app's router slot at its
 * newest container and then removes its older ones, so a restart serves without a gap too.
 */
export class CaasPodmanProvider implements CaasProvider {
  private readonly engine: PodmanEngine;
  private isolated: Promise<void> | null = null;
  private readonly forwarders = new Forwarders();

  constructor(private readonly options: CaasPodmanOptions) {
    this.engine = new PodmanEngine({ dataDir: path.join(options.dataDir, 'podman'), subnetPool: options.subnetPool });
  }

  private routerDir(serviceId: number): string {
    return path.join(this.options.dataDir, 'services', `svc-${serviceId}`, 'router');
  }

  private router(serviceId: number): Promise<HostRouter> {
    return HostRouter.start({ dataDir: this.routerDir(serviceId), bindAddress: this.options.bindAddress });
  }

  private network = (serviceId: number) => `caas-svc${serviceId}`;
  private uidBase = (serviceId: number) => UID_BASE + (serviceId % UID_RANGES) * 65_536;
  private image = (appId: string, deploymentId: string) => `localhost/caas-app/${appId.toLowerCase()}:${deploymentId.toLowerCase()}`;

  /** The isolation rules, once per process (idempotent on the host). */
  private isolation(): Promise<void> {
    this.isolated ??= this.engine.ensureIsolation(this.options.blockedRanges).catch((err) => {
      this.isolated = null;
      throw err;
    });
    return this.isolated;
  }

  async ensureService(serviceId: number): Promise<CaasServiceSpace> {
    await this.isolation();
    const router = await this.router(serviceId);
    return { ip: this.options.bindAddress, ingressUrl: `http://${this.options.bindAddress}:${router.port}` };
  }

  async machine(serviceId: number): Promise<CaasMachine> {
    const running = (await this.engine.containers({ 'caas.service': String(serviceId) })).filter((c) => c.state === 'running');
    const apps = new Set(running.map((c) => c.labels['caas.app']));
    return { cpuCores: os.cpus().length, memoryBytes: os.totalmem(), appsRunning: apps.size };
  }

  async destroyService(serviceId: number): Promise<void> {
    const containers = await this.engine.containers({ 'caas.service': String(serviceId) });
    for (const c of containers) await this.engine.remove(c.name, 5);
    const images = new Set(containers.map((c) => this.image(c.labels['caas.app'], c.labels['caas.deployment'])));
    for (const image of images) await this.engine.removeImage(image);
    const router = await HostRouter.find(this.routerDir(serviceId));
    if (router) await router.destroy();
    await this.engine.removeNetwork(this.network(serviceId));
  }

  async build(serviceId: number, appId: string, deploymentId: string, sourceDir: string): Promise<{ ok: boolean; log: string[] }> {
    await this.engine.ensureBaseImage();
    const built = await this.engine.build(sourceDir, this.image(appId, deploymentId), {
      'caas.service': String(serviceId),
      'caas.app': appId,
      'caas.deployment': deploymentId,
    });
    return { ok: built.ok, log: built.log.split('\n').filter((l) => l.trim() !== '') };
  }

  async start(serviceId: number, appId: string, deploymentId: string, spec: CaasRunSpec, timeoutMs: number): Promise<CaasStartOutcome> {
    await this.isolation();
    const hostPort = await freeLoopbackPort('127.0.0.1');
    const name = `caas-${appId}-${deploymentId}-${Date.now().toString(36)}`.toLowerCase();
    await this.engine.run({
      name,
      image: this.image(appId, deploymentId),
      env: spec.env,
      hostPort,
      containerPort: Number(spec.env.PORT ?? APP_PORT),
      memoryBytes: spec.memoryBytes,
      cpus: spec.cpus,
      uidBase: this.uidBase(serviceId),
      network: this.network(serviceId),
      labels: { 'caas.service': String(serviceId), 'caas.app': appId, 'caas.deployment': deploymentId, 'caas.port': String(hostPort) },
    });
    const waited = await this.engine.waitListening(name, hostPort, timeoutMs);
    if (waited.state === 'listening') return { state: 'listening', hostPort };
    const output = (await this.engine.logs(name, 50)).map((l) => l.message);
    await this.engine.remove(name, 2);
    return { state: waited.state, exitCode: waited.exitCode, output };
  }

  /** The deployment's containers, newest first (by the generation in their names). */
  private async containersOf(deploymentId: string): Promise<Container[]> {
    const list = await this.engine.containers({ 'caas.deployment': deploymentId });
    return list.sort((a, b) => (a.name < b.name ? 1 : a.name > b.name ? -1 : 0));
  }

  async route(serviceId: number, appId: string, hosts: string[], deploymentId: string | null): Promise<void> {
    const router = await this.router(serviceId);
    if (deploymentId === null) return router.setApp(appId, hosts, null);
    const [newest, ...older] = await this.containersOf(deploymentId);
    if (!newest || newest.state !== 'running') throw new BackendUnavailableError('caas', `deployment ${deploymentId} has no running container to route to`);
    await router.setApp(appId, hosts, { host: '127.0.0.1', port: Number(newest.labels['caas.port']) });
    for (const c of older) await this.engine.remove(c.name, 10);
  }

  async isServing(_serviceId: number, _appId: string, deploymentId: string): Promise<boolean> {
    const [newest] = await this.containersOf(deploymentId);
    return newest?.state === 'running';
  }

  /**
   * Stops everything of this host's services (a local run's Ctrl-C): the containers are removed
   * (their images stay) and the routers stopped (their files stay). The keeper starts them again
   * from the records at the next start.
   */
  async stopAll(): Promise<void> {
    for (const c of await this.engine.containers({})) if (c.labels['caas.service']) await this.engine.remove(c.name, 5);
    const services = path.join(this.options.dataDir, 'services');
    for (const entry of existsSync(services) ? readdirSync(services) : []) {
      const router = await HostRouter.find(path.join(services, entry, 'router'));
      if (router) await router.stop();
    }
  }

  async stop(_serviceId: number, _appId: string, deploymentId: string): Promise<void> {
    for (const c of await this.containersOf(deploymentId)) await this.engine.remove(c.name, 10);
  }

  async logs(_serviceId: number, _appId: string, deploymentId: string, lines: number): Promise<CaasLogLine[]> {
    const [newest] = await this.containersOf(deploymentId);
    return newest ? this.engine.logs(newest.name, lines) : [];
  }

  /**
   * A server of this host (a database instance on loopback) as the service's containers reach it:
   * on their network's gateway, the same port, through a forwarder of this process, with one
   * isolation exception for exactly that address and port on that network's bridge.
   */
  async reachable(serviceId: number, target: { host: string; port: number }): Promise<{ host: string; port: number }> {
    await this.isolation();
    const { gateway } = await this.engine.networkGateway(this.network(serviceId), target.port);
    await this.forwarders.ensure({ host: gateway, port: target.port }, target);
    return { host: gateway, port: target.port };
  }

  async removeApp(serviceId: number, appId: string, deploymentIds: string[]): Promise<void> {
    const router = await HostRouter.find(this.routerDir(serviceId));
    if (router) await router.removeApp(appId);
    for (const c of await this.engine.containers({ 'caas.service': String(serviceId), 'caas.app': appId })) await this.engine.remove(c.name, 5);
    for (const id of deploymentIds) await this.engine.removeImage(this.image(appId, id));
  }
}
