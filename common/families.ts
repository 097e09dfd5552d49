/**
 * The one list of product families. Everything that enumerates families (the Service `family`
 * enum, the catalog's product families, the backend outage switches, the generic provisioner's
 * build times, the dev outage route) derives from this table; a new family is one entry here.
 */
export interface FamilyInfo {
  /** Catalog product family (`products.product_family`), also the name of its backend switch. */
  readonly name: string;
  /** What `Service.family` says for it (SPEC "Service"): families without a v1 resource are `other`. */
  readonly serviceFamily: 'vps' | 'dns' | 'dbaas' | 'caas' | 'lb' | 'objectstorage' | 'mailgateway' | 'other';
  /** How long the generic simulated provisioner takes to build one, at SIM_DELAY_SCALE 1. */
  readonly simulatedBuildMs: number;
  /** Whether its services get a public address. */
  readonly hasAddress: boolean;
}

export const FAMILIES = [
  { name: 'vps', serviceFamily: 'vps', simulatedBuildMs: 60_000, hasAddress: true },
  { name: 'dns', serviceFamily: 'dns', simulatedBuildMs: 2_000, hasAddress: false },
  { name: 'dbaas', serviceFamily: 'dbaas', simulatedBuildMs: 45_000, hasAddress: true },
  { name: 'caas', serviceFamily: 'caas', simulatedBuildMs: 30_000, hasAddress: true },
  { name: 'lb', serviceFamily: 'lb', simulatedBuildMs: 20_000, hasAddress: true },
  { name: 'objectstorage', serviceFamily: 'objectstorage', simulatedBuildMs: 5_000, hasAddress: false },
  { name: 'mailgateway', serviceFamily: 'mailgateway', simulatedBuildMs: 5_000, hasAddress: false },
  { name: 'wordpress', serviceFamily: 'other', simulatedBuildMs: 90_000, hasAddress: true },
  { name: 'images', serviceFamily: 'other', simulatedBuildMs: 5_000, hasAddress: false },
  { name: 'serverless', serviceFamily: 'other', simulatedBuildMs: 5_000, hasAddress: false },
] as const satisfies readonly FamilyInfo[];

export type ProductFamily = (typeof FAMILIES)[number]['name'];
export const PRODUCT_FAMILIES = FAMILIES.map((f) => f.name) as [ProductFamily, ...ProductFamily[]];

export type ServiceFamily = FamilyInfo['serviceFamily'];
export const SERVICE_FAMILIES = [...new Set(FAMILIES.map((f) => f.serviceFamily))] as [ServiceFamily, ...ServiceFamily[]];

/** Backends with an outage switch: one per product family, plus billing and webhook delivery. */
export const BACKENDS = [...PRODUCT_FAMILIES, 'billing', 'webhooks'] as const;
export type Backend = (typeof BACKENDS)[number];

export function familyInfo(name: string): FamilyInfo | undefined {
  return FAMILIES.find((f) => f.name === name);
}

/** The outage switch that governs a catalog product family (billing for anything unknown). */
export function backendOf(productFamily: string): Backend {
  return (BACKENDS as readonly string[]).includes(productFamily) ? (productFamily as Backend) : 'billing';
}
