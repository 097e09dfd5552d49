/**
 * What an image plan includes each UTC month and what beyond it costs (SPEC leaves the numbers "not
 * shown"; docs/images.md lists them). With `hard_cap`, nothing beyond the included amount is served
 * (delivery answers 429 `quota_exceeded`) and nothing is billed.
 */
export interface ImagesPlan {
  origin_limit: number;
  included: { transformations: number; deliveries: number; egress_bytes: number; hard_cap: boolean };
  /** USD per unit beyond the included amount. */
  prices: { transformation: number; delivery: number; egress_byte: number };
}

const GB = 1_000_000_000;

export const IMAGES_PLANS: Record<string, ImagesPlan> = {
  'images-basic': {
    origin_limit: 10,
    included: { transformations: 5_000, deliveries: 100_000, egress_bytes: 10 * GB, hard_cap: false },
    prices: { transformation: 0.0005, delivery: 0.00001, egress_byte: 0.05 / GB },
  },
  // A capped plan (free tiers, trials): service stops at the included amounts.
  'images-capped': {
    origin_limit: 3,
    included: { transformations: 1_000, deliveries: 10_000, egress_bytes: 1 * GB, hard_cap: true },
    prices: { transformation: 0, delivery: 0, egress_byte: 0 },
  },
};

export function planOf(product: string): ImagesPlan {
  return IMAGES_PLANS[product] ?? IMAGES_PLANS['images-basic'];
}
