/**
 * Container apps (SPEC "CaaS", DECISIONS "CaaS"): what the backend can do for a service's apps, in
 * its own terms. The real adapter (providers/caas/caas.podman.ts) builds images and runs containers
 * with podman and routes each app's Host names through the service's HAProxy; the simulator
 * (providers/simulator/caas.simulator.ts) keeps the same state in PostgreSQL and runs nothing.
 *
 * Names: apps by their public id (`app_12`), deployments by theirs (`dep_<ulid>`), both validated by
 * the caller; a deployment's image and container are named from them, so every call is idempotent
 * (activities retry). Errors: only those of providers/errors.ts.
 */
export interface CaasServiceSpace {
  /** The address the service's router listens on (a domain must point here). */
  ip: string;
  /** Where apps are served by Host (`http://<ip>:<port>`; the port is ignored in the Host header). */
  ingressUrl: string;
}

export interface CaasMachine {
  cpuCores: number;
  memoryBytes: number;
  appsRunning: number;
}

export interface CaasRunSpec {
  /** The app's variables and the platform's (`PORT`, `DATABASE_URL*`), for the container's creation only. */
  env: Record<string, string>;
  memoryBytes: number;
  cpus: number;
}

export type CaasStartOutcome = { state: 'listening'; hostPort: number } | { state: 'exited' | 'timeout'; exitCode: number | null; output: string[] };

export interface CaasLogLine {
  /** ISO 8601 (UTC). */
  timestamp: string;
  message: string;
}

export interface CaasProvider {
  /** Sets up the service's space (its router, its network, its user range); idempotent. */
  ensureService(serviceId: number): Promise<CaasServiceSpace>;
  /** The service's machine as the backend sees it now (live). */
  machine(serviceId: number): Promise<CaasMachine>;
  /** Removes everything of the service (containers, images, router, network); idempotent. */
  destroyService(serviceId: number): Promise<void>;
  /**
   * Builds the deployment's image from a source directory (a root `Containerfile`, else a
   * `package.json`). `ok: false` is the app's own failure, with the build's output; a platform
   * failure throws.
   */
  build(serviceId: number, appId: string, deploymentId: string, sourceDir: string): Promise<{ ok: boolean; log: string[] }>;
  /** Starts the deployment's container (not routed yet) and waits until it listens on `$PORT`, exits, or `timeoutMs` passes. */
  start(serviceId: number, appId: string, deploymentId: string, spec: CaasRunSpec, timeoutMs: number): Promise<CaasStartOutcome>;
  /**
   * Routes the app's host names to the deployment (null: to nothing, 404), without dropping a
   * request when it replaces another deployment.
   */
  route(serviceId: number, appId: string, hosts: string[], deploymentId: string | null): Promise<void>;
  /** Whether the deployment has a running container (the keeper starts one again when not). */
  isServing(serviceId: number, appId: string, deploymentId: string): Promise<boolean>;
  /** Stops and removes the deployment's container; its image stays (the history keeps it). Absent is fine. */
  stop(serviceId: number, appId: string, deploymentId: string): Promise<void>;
  /** The last `lines` of the deployment's container output, oldest first ([] when it has none). */
  logs(serviceId: number, appId: string, deploymentId: string, lines: number): Promise<CaasLogLine[]>;
  /**
   * The address at which the service's containers reach a server of this host (a database
   * instance listening on loopback): the backend makes it reachable to them, and only to them.
   */
  reachable(serviceId: number, target: { host: string; port: number }): Promise<{ host: string; port: number }>;
  /** Removes the app's containers, images and route. */
  removeApp(serviceId: number, appId: string, deploymentIds: string[]): Promise<void>;
}
