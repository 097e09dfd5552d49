/**
 * What the billing backend can do: the orderable catalog, payment methods, promo codes, account
 * credit, orders, invoices, and the billing contract of the services an order creates.
 * The embedded implementation is providers/simulator/billing.simulator.ts (state in PostgreSQL).
 */

export const BILLING_CYCLES = ['monthly', 'quarterly', 'semiannually', 'annually', 'biennially', 'triennially'] as const;
export type BillingCycle = (typeof BILLING_CYCLES)[number];

/** Months a cycle covers (next due date). */
export const CYCLE_MONTHS: Record<BillingCycle, number> = {
  monthly: 1,
  quarterly: 3,
  semiannually: 6,
  annually: 12,
  biennially: 24,
  triennially: 36,
};

/** Real product families of the catalog; `wordpress`, `images` and `serverless` are `other` as services. */
export const PRODUCT_FAMILIES = ['vps', 'dns', 'dbaas', 'caas', 'lb', 'objectstorage', 'mailgateway', 'wordpress', 'images', 'serverless'] as const;
export type ProductFamily = (typeof PRODUCT_FAMILIES)[number];

export interface ProductOption {
  name: string;
  type: 'string' | 'integer' | 'boolean' | 'enum';
  required: boolean;
  default?: string | number | boolean | null;
  /** Allowed values of an `enum` option. */
  values?: string[];
  /** Bounds of an `integer` option. */
  min?: number;
  max?: number;
  /** Regular expression a `string` option must match. */
  pattern?: string;
  description?: string;
}

export interface ProductRecord {
  id: number;
  slug: string;
  name: string;
  description: string | null;
  family: string;
  product_family: string;
  options_schema: ProductOption[];
  capabilities: Record<string, boolean>;
  requires_site_name: boolean;
  hidden: boolean;
  retired: boolean;
  /** Prices in one currency: cycle -> amount, only cycles actually sold. */
  prices: Partial<Record<BillingCycle, number>>;
}

export interface PaymentMethodView {
  object: 'payment_method';
  id: string;
  name: string;
  default: boolean;
}

export interface PromoCheck {
  ok: boolean;
  percentOff: number;
  /** Why a code is refused (shown in the error message). */
  reason?: string;
}

export type InvoiceStatus = 'unpaid' | 'paid' | 'cancelled';

export interface InvoiceView {
  object: 'invoice';
  id: string;
  status: InvoiceStatus;
  currency: string;
  /** Catalog price of the first cycle. */
  subtotal: number;
  /** Promo code discount. */
  discount: number;
  /** subtotal - discount: what the order costs. */
  total: number;
  /** Part of `total` paid from account credit. */
  credit_applied: number;
  /** What remains to pay (0 once paid or cancelled). */
  amount_due: number;
  /** free | promo | credit | payment_method, null while unpaid. */
  settled_by: string | null;
  /** Where the customer pays in the panel; null unless unpaid. */
  payment_url: string | null;
  created_at: string | null;
  paid_at: string | null;
  cancelled_at: string | null;
}

/** The invoice as carried in an order operation's `result.invoice` (DECISIONS "Orders"). */
export interface OperationInvoice {
  id: string;
  status: InvoiceStatus;
  total: number;
  currency: string;
  payment_url: string | null;
}

export type OrderStatus = 'pending' | 'active' | 'cancelled';
export type CancellationType = 'immediate' | 'end_of_cycle';

export interface OrderRecord {
  id: number;
  account_id: number;
  operation_id: string;
  product_id: number;
  product: string;
  billing_cycle: string;
  options: Record<string, unknown>;
  promo_code: string | null;
  site_name: string | null;
  payment_method: string;
  currency: string;
  status: OrderStatus;
  cancellation_type: CancellationType | null;
  cancellation_reason: string | null;
  cancellation_requested_at: Date | null;
  credential_id: string | null;
  created_at: Date;
  paid_at: Date | null;
  cancelled_at: Date | null;
}

export interface NewOrder {
  /** Taken from the orders sequence beforehand (the operation names the order before it exists). */
  id?: number;
  accountId: number;
  operationId: string;
  product: ProductRecord;
  billingCycle: BillingCycle;
  options: Record<string, unknown>;
  promoCode: string | null;
  siteName: string | null;
  paymentMethod: string;
  currency: string;
  credentialId: string | null;
}

/** An order recorded, or why not (the messages are written for customers). */
export type CreateOrderOutcome =
  | { ok: true; order: OrderRecord }
  | { ok: false; code: 'hostname_taken' }
  | { ok: false; code: 'invalid_promocode'; reason: string };

/** The outcome of cancelling an order (POST /v1/orders/{id}/cancel). */
export interface CancelOutcome {
  /** `voided`: an unpaid order was voided with its invoice; `requested`: a cancellation request per service. */
  kind: 'voided' | 'requested' | 'already_cancelled';
  order: OrderRecord;
}

export interface BillingProvider {
  /** A product by slug with its prices in `currency` (hidden and retired ones included; callers decide). */
  getProduct(slug: string, currency: string): Promise<ProductRecord | null>;
  /** Listed catalog (neither hidden nor retired, priced in `currency`), newest first, keyset by id. */
  listProducts(opts: { currency: string; family?: string; limit: number; before?: number }): Promise<{ items: ProductRecord[]; hasMore: boolean }>;
  listPaymentMethods(): Promise<PaymentMethodView[]>;
  checkPromo(code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck>;
  /** A hosted site's name is taken by a live order or service (any account). */
  isSiteNameTaken(siteName: string): Promise<boolean>;

  /**
   * Records a new order (inside the caller's transaction, beside the operation row). Refuses a taken
   * site name and a promo code that is no longer valid (inactive, expired, used up, not for this
   * product or cycle) atomically, so concurrent orders can neither share a site name nor use a code
   * more than `max_uses` times.
   */
  createOrder(trx: unknown, order: NewOrder): Promise<CreateOrderOutcome>;
  getOrder(accountId: number, orderId: number): Promise<OrderRecord | null>;
  getOrderById(orderId: number): Promise<OrderRecord | null>;
  listOrders(opts: { accountId: number; status?: OrderStatus; limit: number; before?: number }): Promise<{ items: OrderRecord[]; hasMore: boolean }>;

  /**
   * Issues the order's invoice (once; a repeated call returns the same one) and settles it at once
   * when nothing is due (free product, 100 % promo) or when the account credit covers it.
   */
  issueInvoice(orderId: number): Promise<InvoiceView>;
  getInvoiceForOrder(orderId: number): Promise<InvoiceView | null>;
  invoicesForOrders(orderIds: number[]): Promise<Map<number, InvoiceView>>;
  /** The customer paid in the panel: unpaid -> paid, the order becomes active. Null when unknown. */
  payInvoice(invoiceId: number): Promise<{ invoice: InvoiceView; order: OrderRecord } | null>;

  /** Voids an unpaid order and its invoice at once, or records a cancellation request per service. */
  cancelOrder(accountId: number, orderId: number, request: { type: CancellationType; reason: string | null }): Promise<CancelOutcome | null>;

  /**
   * Carries out the cancellation requests due by `today` (YYYY-MM-DD): each such service is
   * terminated (and `service.terminated` emitted). Returns the ids it terminated.
   */
  executeDueCancellations(today: string): Promise<number[]>;

  /** Creates the order's services (`pending`, once; a repeated call returns the same ids). */
  createServicesForOrder(orderId: number): Promise<number[]>;
  /** Service ids an order created. */
  servicesOfOrders(orderIds: number[]): Promise<Map<number, ServiceBillingView[]>>;
}

export interface ServiceBillingView {
  service_id: number;
  product_family: string;
  recurring_amount: number;
  currency: string;
  cancellation: { type: CancellationType; reason: string | null; requested_at: string | null; effective_date: string | null } | null;
}
