/**
 * The backend that builds services of the families that have no provider of their own yet: it is
 * told to build one, says when it is ready (with its address), and destroys it. Only the simulator
 * implements it (providers/simulator/build.simulator.ts); a family with a real backend registers its
 * own provisioner instead (domain/provisioning.ts).
 */
export interface BuildTarget {
  serviceId: number;
  /** The catalog's product family: its outage switch governs the build. */
  productFamily: string;
}

export interface BuildStatus {
  ready: boolean;
  /** The public address the service got, for families that have one. */
  primaryIp: string | null;
}

export interface ServiceBuildProvider {
  /** Starts building (idempotent: a second call for the same service changes nothing). */
  startBuild(target: BuildTarget): Promise<void>;
  buildStatus(target: BuildTarget): Promise<BuildStatus>;
  /** Tears the service down; no-op when there is nothing. */
  destroy(target: BuildTarget): Promise<void>;
}
