import type { Config } from '../common/config';
import type { Db } from '../db/knex';
import { HostPlacements } from '../domain/hosts/directory';
import { buildProviders, type Providers } from '../providers';
import type { HostCaller } from '../providers/host-routing';
import type { AnyBackend } from '../providers/backend';
import { caasFamily } from './caas';
import { dbaasFamily } from './dbaas';
import { dnsFamily } from './dns';
import { hostsFamily } from './hosts';
import { imagesFamily } from './images';
import { lbFamily } from './lb';
import { mailGatewayFamily } from './mailgateway';
import { objectStorageFamily } from './objectstorage';
import type { FamilyManifest } from './manifest';
import { ordersFamily } from './orders';
import { serverlessFamily } from './serverless';
import { vpsFamily } from './vps';
import { webhooksFamily } from './webhooks';
import { wordpressFamily } from './wordpress';

export type { FamilyManifest } from './manifest';

/**
 * The families of the API, one manifest each (families/<family>.ts): the one list that the route
 * table, the dev routes, the providers, the provisioners, the worker's activities and the demo seed
 * read. A family adds one line here. The order is the route table's (and the OpenAPI document's).
 */
export const families: readonly FamilyManifest[] = [
  ordersFamily,
  webhooksFamily,
  hostsFamily,
  vpsFamily,
  lbFamily,
  dbaasFamily,
  dnsFamily,
  objectStorageFamily,
  imagesFamily,
  mailGatewayFamily,
  serverlessFamily,
  wordpressFamily,
  // Last: its seed builds the demo app's image, which takes a while (`npm start` keeps the host's
  // registration fresh meanwhile).
  caasFamily,
];

/** The families' backends, for the provider registry. */
export function familyBackends(list: readonly FamilyManifest[] = families): AnyBackend[] {
  return list.flatMap((family) => (family.backend ? [family.backend] : []));
}

/**
 * The families whose servers run on hosts in this configuration (their real backend is selected and
 * placed: docs/hosts.md), each with the resource object of its services.
 */
export function placedFamilies(config: Config, list: readonly FamilyManifest[] = families): Map<string, { object: string; moveWorkflow?: string }> {
  const placed = new Map<string, { object: string; moveWorkflow?: string }>();
  for (const backend of familyBackends(list)) {
    const spec = backend.real?.placed;
    if (spec && backend.real!.selected(config)) placed.set(backend.family, { object: spec.object, moveWorkflow: spec.moveWorkflow });
  }
  return placed;
}

/**
 * Every provider of one process: the platform's and each family's backend (providers/index.ts).
 * `host` is the host this process is the agent of (the worker, the seed), else calls about servers go
 * to their host through `caller` (null: no host reachable from here).
 */
export function createProviders(
  ctx: { db: Db; config: Config; host?: string | null; caller?: HostCaller | null },
  list: readonly FamilyManifest[] = families,
): Providers {
  const directory = new HostPlacements(ctx.db, ctx.host ?? null, placedFamilies(ctx.config, list));
  return buildProviders({ db: ctx.db, config: ctx.config, hosts: { directory, caller: ctx.caller ?? null } }, familyBackends(list));
}
