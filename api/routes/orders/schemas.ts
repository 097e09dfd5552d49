import { z } from 'zod';
import { SERVICE_FAMILIES } from '../../../domain/services';
import { BILLING_CYCLES, PRODUCT_FAMILIES } from '../../../providers/billing.provider';
import { ServiceSchema } from '../../schemas';

/** Request and response schemas of ordering (one schema: validation, handler types, OpenAPI). */
export const ts = z.string().nullable();
export const FAMILY_FILTER = [...new Set<string>([...SERVICE_FAMILIES, ...PRODUCT_FAMILIES])] as [string, ...string[]];
export const PRODUCTS_PAGE_DEFAULT = 100;

export const ProductOptionSchema = z.object({
  name: z.string(),
  type: z.enum(['string', 'integer', 'boolean', 'enum']),
  required: z.boolean(),
  default: z.union([z.string(), z.number(), z.boolean()]).nullable().optional(),
  values: z.array(z.string()).optional(),
  min: z.number().optional(),
  max: z.number().optional(),
  pattern: z.string().optional(),
  description: z.string().optional(),
});

export const ProductSchema = z
  .object({
    object: z.literal('product'),
    product: z.string().meta({ description: 'Stable slug, the value of `product` in POST /v1/orders' }),
    name: z.string(),
    description: z.string().nullable(),
    family: z.enum(SERVICE_FAMILIES).meta({ description: 'Family of the Service the product creates' }),
    product_family: z.string().meta({ description: 'The catalog family (wordpress, images, serverless are `other` as services)' }),
    prices: z.record(z.string(), z.number()).meta({ description: 'Billing cycle -> price in the account currency; only cycles actually sold' }),
    options: z.array(ProductOptionSchema),
    requires_site_name: z.boolean(),
    capabilities: z.record(z.string(), z.boolean()),
  })
  .meta({ id: 'Product' });

export const PaymentMethodSchema = z
  .object({ object: z.literal('payment_method'), id: z.string(), name: z.string(), default: z.boolean() })
  .meta({ id: 'PaymentMethod' });

export const InvoiceSchema = z
  .object({
    object: z.literal('invoice'),
    id: z.string(),
    status: z.enum(['unpaid', 'paid', 'cancelled']),
    currency: z.string(),
    subtotal: z.number(),
    discount: z.number(),
    total: z.number(),
    credit_applied: z.number(),
    amount_due: z.number(),
    settled_by: z.string().nullable(),
    payment_url: z.string().nullable(),
    created_at: ts,
    paid_at: ts,
    cancelled_at: ts,
  })
  .meta({ id: 'Invoice' });

export const CancellationSchema = z.object({
  type: z.enum(['immediate', 'end_of_cycle']),
  reason: z.string().nullable(),
  requested_at: ts,
});

export const OrderSchema = z
  .object({
    object: z.literal('order'),
    id: z.string(),
    status: z.enum(['pending', 'active', 'cancelled']),
    product: z.string(),
    billing_cycle: z.string(),
    options: z.record(z.string(), z.unknown()),
    promo_code: z.string().nullable(),
    site_name: z.string().nullable(),
    payment_method: z.string(),
    currency: z.string(),
    operation: z.string(),
    invoice: InvoiceSchema.nullable(),
    services: z.array(
      // The Service resource plus its billing terms.
      ServiceSchema.extend({
        recurring_amount: z.number(),
        currency: z.string(),
        cancellation: CancellationSchema.extend({ effective_date: z.string().nullable() }).nullable(),
      }),
    ),
    cancellation: CancellationSchema.nullable(),
    created_at: ts,
    paid_at: ts,
    cancelled_at: ts,
  })
  .meta({ id: 'Order' });

export const HOSTNAME = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

export const CreateOrderBody = z
  .object({
    product: z.string().min(1).max(100).meta({ description: 'Product slug from GET /v1/orders/products', example: 'dns-zone' }),
    billing_cycle: z
      .enum(BILLING_CYCLES)
      .optional()
      .meta({ description: "One of the product's sold cycles; default `monthly` when sold, else the shortest sold cycle" }),
    options: z.record(z.string(), z.unknown()).optional().meta({ description: "Product options, as described by the product's `options`" }),
    promo_code: z.string().min(1).max(64).optional(),
    site_name: z
      .string()
      .transform((v) => v.toLowerCase().replace(/\.$/, ''))
      .pipe(z.string().regex(HOSTNAME, 'must be a hostname (letters, digits, hyphens and dots)'))
      .optional()
      .meta({ description: "Hosted sites: the site's hostname; must not be taken (`hostname_taken`)" }),
    payment_method: z.string().min(1).max(64).optional().meta({ description: 'From GET /v1/orders/payment-methods; the default one when omitted' }),
  })
  .strict();

export const CancelOrderBody = z
  .object({
    type: z
      .enum(['immediate', 'end_of_cycle'])
      .default('end_of_cycle')
      .meta({ description: 'Active orders: when billing ends each service. Ignored for an unpaid order, which is voided at once' }),
    reason: z.string().min(1).max(500).optional(),
  })
  .strict();
