import type { Config } from '../common/config';
import type { Db } from '../db/knex';
import { buildProviders, type Providers } from '../providers';
import type { AnyBackend } from '../providers/backend';
import { dbaasFamily } from './dbaas';
import { dnsFamily } from './dns';
import { lbFamily } from './lb';
import type { FamilyManifest } from './manifest';
import { ordersFamily } from './orders';
import { vpsFamily } from './vps';
import { webhooksFamily } from './webhooks';

export type { FamilyManifest } from './manifest';

/**
 * The families of the API, one manifest each (families/<family>.ts): the one list that the route
 * table, the dev routes, the providers, the provisioners, the worker's activities and the demo seed
 * read. A family adds one line here. The order is the route table's (and the OpenAPI document's).
 */
export const families: readonly FamilyManifest[] = [ordersFamily, webhooksFamily, vpsFamily, lbFamily, dbaasFamily, dnsFamily];

/** The families' backends, for the provider registry. */
export function familyBackends(list: readonly FamilyManifest[] = families): AnyBackend[] {
  return list.flatMap((family) => (family.backend ? [family.backend] : []));
}

/** Every provider of one process: the platform's and each family's backend (providers/index.ts). */
export function createProviders(ctx: { db: Db; config: Config }, list: readonly FamilyManifest[] = families): Providers {
  return buildProviders(ctx, familyBackends(list));
}
