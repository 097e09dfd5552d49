/**
 * What the billing backend can do: the orderable catalog, payment methods, promo codes, account
 * credit, invoices, and the billing contract of the services an order creates.
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

/** Real product families of the catalog (`wordpress`, `images` and `serverless` are `other` as services): the one list of common/families.ts. */
export { PRODUCT_FAMILIES, type ProductFamily } from '../common/families';

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

export type CancellationType = 'immediate' | 'end_of_cycle';

/** What billing needs to know of an order to invoice it (the order itself is the control plane's record). */
export interface BillableOrder {
  orderId: number;
  accountId: number;
  currency: string;
  /** Price of the first cycle, fixed when the order was placed. */
  price: number;
  percentOff: number;
}

/** A service's contract with billing (opened when an order creates the service). */
export interface NewContract {
  serviceId: number;
  orderId: number;
  productFamily: string;
  recurringAmount: number;
  currency: string;
  /** A cancellation requested before the service existed (on the order). */
  cancellation: { type: CancellationType; reason: string | null; requestedAt: Date; effectiveDate: string } | null;
}

/**
 * The billing backend. It keeps its own records (catalog, promo codes, invoices, account credit,
 * service contracts) and never writes the control plane's: orders and services are the domain's
 * (domain/orders/store.ts), which calls billing for what billing decides.
 */
export interface BillingProvider {
  /** A product by slug with its prices in `currency` (hidden and retired ones included; callers decide). */
  getProduct(slug: string, currency: string): Promise<ProductRecord | null>;
  /** Listed catalog (neither hidden nor retired, priced in `currency`), newest first, keyset by id. */
  listProducts(opts: { currency: string; family?: string; limit: number; before?: number }): Promise<{ items: ProductRecord[]; hasMore: boolean }>;
  listPaymentMethods(): Promise<PaymentMethodView[]>;
  /** Whether a code applies to the product and cycle (a first check, before anything is written). */
  checkPromo(code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck>;
  /**
   * Takes one use of a promo code, checking it again under its row lock (active, not expired, uses
   * left), inside the caller's transaction: parallel orders cannot exceed `max_uses`.
   */
  redeemPromo(trx: unknown, code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck>;
  /** Gives a use back (the order was voided, or never started). */
  releasePromo(code: string): Promise<void>;

  /**
   * Issues the order's invoice (once; a repeated call returns the same one) and settles it at once
   * when nothing is due (free product, 100 % promo) or when the account credit covers it.
   */
  issueInvoice(order: BillableOrder): Promise<InvoiceView>;
  getInvoiceForOrder(orderId: number): Promise<InvoiceView | null>;
  invoicesForOrders(orderIds: number[]): Promise<Map<number, InvoiceView>>;
  /** The customer paid in the panel: unpaid -> paid. Null when unknown. */
  payInvoice(invoiceId: number): Promise<{ invoice: InvoiceView; orderId: number } | null>;
  /**
   * Voids the order's invoice if it is unpaid, or records a void one if none was issued yet (so a
   * later issue finds it void). A paid invoice is returned as it is: the caller cancels per service.
   */
  voidInvoice(order: BillableOrder): Promise<InvoiceView>;
  /** The account's credit balance (account currency). */
  accountCredit(accountId: number): Promise<number>;

  /** Opens the contract of a service an order created (once). */
  openContract(contract: NewContract): Promise<void>;
  /** Records a cancellation request on services' contracts; billing carries it out on the effective date. */
  requestCancellation(requests: Array<{ serviceId: number; type: CancellationType; reason: string | null; effectiveDate: string }>): Promise<void>;
  /**
   * The contracts whose cancellation is due by `today` (YYYY-MM-DD) and not carried out yet; they are
   * marked carried out. The caller terminates the services (a real billing system notifies us).
   */
  takeDueCancellations(today: string): Promise<number[]>;
  /** The contracts of the services some orders created. */
  servicesOfOrders(orderIds: number[]): Promise<Map<number, ServiceBillingView[]>>;
}

export interface ServiceBillingView {
  service_id: number;
  product_family: string;
  recurring_amount: number;
  currency: string;
  cancellation: { type: CancellationType; reason: string | null; requested_at: string | null; effective_date: string | null } | null;
}
