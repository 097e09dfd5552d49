import { createOrder } from '../domain/orders/store';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createUser } from './helpers/fixtures';
import { seedOrders } from '../db/seeds/orders.seed';
import { OperationSchema } from '../api/schemas';
import { OrderSchema, ProductSchema } from '../api/routes/orders/schemas';
import { eventsFor, newCustomer, placeOrder, storedOperation, waitFor, type Customer } from './orders.support';

/**
 * Orders end to end over HTTP against the Temporal dev server, with short durations:
 * ORDER_ACTIVATION_TIMEOUT=4s; simulated work done at once (SIM_DELAY_SCALE=0), so that a service is
 * active at the order workflow's first check instead of its next poll 2 s later; and operation
 * answers cached for 100 ms (OPERATION_CACHE_TTL), so that a test polling GET /v1/operations/{id}
 * sees a change without waiting out the 2 s default.
 */
let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ env: { ORDER_ACTIVATION_TIMEOUT: '4s', SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms' } });
  await seedOrders(stack.db);
  await seedOrders(stack.db); // idempotent
});
afterAll(() => stack?.close());

const result = (opId: string) => stack.temporal!.client.workflow.getHandle(opId).result();
const getOp = (c: Customer, id: string) => stack.http.get(`/v1/operations/${id}`, { token: c.token });
const getOrder = (c: Customer, id: string) => stack.http.get(`/v1/orders/${id}`, { token: c.token });

describe('catalog and payment methods', () => {
  it('lists the orderable catalog (limit 100 by default), without hidden or retired products', async () => {
    const c = await newCustomer(stack);
    const res = await stack.http.get('/v1/orders/products', { token: c.token });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    const slugs = res.body.data.map((p: any) => p.product);
    expect(slugs).toHaveLength(15); // 17 seeded, one hidden and one retired
    expect(slugs).not.toContain('vps-legacy');
    expect(slugs).not.toContain('vps-staff');
    for (const p of res.body.data) expect(ProductSchema.safeParse(p).success, JSON.stringify(p)).toBe(true);
    const families = new Set(res.body.data.map((p: any) => p.family));
    for (const f of ['vps', 'dns', 'dbaas', 'caas', 'lb', 'objectstorage', 'mailgateway', 'other']) expect(families).toContain(f);
    const lb = res.body.data.find((p: any) => p.product === 'lb-s');
    expect(lb.prices).toEqual({ monthly: 6 }); // only cycles actually sold
    const dns = res.body.data.find((p: any) => p.product === 'dns-zone');
    expect(dns.prices).toEqual({ monthly: 0, annually: 0 });
    expect(dns.options[0]).toMatchObject({ name: 'zone', type: 'string', required: true });
  });

  it('filters by family (service family or catalog family) and pages with an opaque cursor', async () => {
    const c = await newCustomer(stack);
    const vps = await stack.http.get('/v1/orders/products?family=vps', { token: c.token });
    expect(vps.body.data.map((p: any) => p.product).sort()).toEqual(['vps-l', 'vps-s']);
    const other = await stack.http.get('/v1/orders/products?family=other', { token: c.token });
    expect(other.body.data.map((p: any) => p.product_family).sort()).toEqual(['images', 'serverless', 'serverless', 'serverless', 'serverless', 'wordpress']);
    const wp = await stack.http.get('/v1/orders/products?family=wordpress', { token: c.token });
    expect(wp.body.data.map((p: any) => p.product)).toEqual(['wordpress-starter']);
    expect(wp.body.data[0]).toMatchObject({ family: 'other', requires_site_name: true });

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await stack.http.get(`/v1/orders/products?limit=4${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token: c.token });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(4);
      seen.push(...page.body.data.map((p: any) => p.product));
      cursor = page.body.has_more ? page.body.next_cursor : null;
    } while (cursor);
    expect(seen).toHaveLength(15);
    expect(new Set(seen).size).toBe(15);

    expect((await stack.http.get('/v1/orders/products?limit=0', { token: c.token })).body.error).toMatchObject({ code: 'validation_failed', param: 'limit' });
    expect((await stack.http.get('/v1/orders/products?family=spaceships', { token: c.token })).body.error).toMatchObject({
      code: 'validation_failed',
      param: 'family',
    });
    expect((await stack.http.get('/v1/orders/products?cursor=forged', { token: c.token })).body.error).toMatchObject({
      code: 'validation_failed',
      param: 'cursor',
    });
  });

  it('prices the catalog in the account currency', async () => {
    const c = await newCustomer(stack, { currency: 'USD' });
    const res = await stack.http.get('/v1/orders/products?family=lb', { token: c.token });
    expect(res.body.data[0].prices).toEqual({ monthly: 6.5 });
  });

  it('lists payment methods with exactly one default', async () => {
    const c = await newCustomer(stack);
    const res = await stack.http.get('/v1/orders/payment-methods', { token: c.token });
    expect(res.status).toBe(200);
    expect(res.body.data.map((m: any) => m.id)).toEqual(['card', 'paypal', 'bank_transfer']);
    expect(res.body.data.filter((m: any) => m.default)).toEqual([{ object: 'payment_method', id: 'card', name: 'Credit or debit card', default: true }]);
  });

  it('does not let /v1/orders/{id} capture the static paths', async () => {
    const c = await newCustomer(stack);
    expect((await stack.http.get('/v1/orders/products', { token: c.token })).body.object).toBe('list');
    expect((await stack.http.get('/v1/orders/payment-methods', { token: c.token })).body.object).toBe('list');
  });
});

describe('POST /v1/orders: rejected before billing', () => {
  let c: Customer;
  beforeAll(async () => {
    c = await newCustomer(stack, { credit: 100 });
  });

  it('requires an Idempotency-Key', async () => {
    const res = await stack.http.post('/v1/orders', { token: c.token, body: { product: 'dns-zone', options: { zone: 'a.example' } } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('idempotency_key_required');
  });

  it.each([
    ['unknown product', { product: 'teleporter' }, 'product'],
    ['retired product', { product: 'vps-legacy' }, 'product'],
    ['unsold cycle', { product: 'lb-s', billing_cycle: 'annually' }, 'billing_cycle'],
    ['unknown cycle', { product: 'lb-s', billing_cycle: 'fortnightly' }, 'billing_cycle'],
    ['bad enum option', { product: 'vps-s', options: { os: 'windows-95' } }, 'options.os'],
    ['option out of bounds', { product: 'vps-s', options: { cores: 16 } }, 'options.cores'],
    ['unknown option', { product: 'vps-s', options: { gpu: true } }, 'options.gpu'],
    ['missing required option', { product: 'dns-zone' }, 'options.zone'],
    ['bad option format', { product: 'dns-zone', options: { zone: 'not a domain' } }, 'options.zone'],
    ['options not an object', { product: 'dns-zone', options: 'zone=example.org' }, 'options'],
    ['site name missing', { product: 'wordpress-starter' }, 'site_name'],
    ['site name on a product without sites', { product: 'lb-s', site_name: 'x.example.test' }, 'site_name'],
    ['malformed site name', { product: 'wordpress-starter', site_name: 'not a host!' }, 'site_name'],
    ['unknown payment method', { product: 'lb-s', payment_method: 'seashells' }, 'payment_method'],
    ['unknown field', { product: 'lb-s', quantity: 2 }, ''],
    ['no product', {}, 'product'],
  ])('%s -> 400 validation_failed', async (_name, body, param) => {
    const before = await stack.db('orders').where({ account_id: c.accountId }).count('* as n').first();
    const res = await placeOrder(stack, c, body);
    expect(res.status, res.text).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'validation_failed' });
    if (param) expect(res.body.error.errors.map((e: any) => e.param)).toContain(param);
    expect(res.body.error.request_id).toBe(res.headers.get('x-request-id'));
    const after = await stack.db('orders').where({ account_id: c.accountId }).count('* as n').first();
    expect(after).toEqual(before);
  });

  it.each([
    ['unknown code', 'NOPE'],
    ['expired code', 'LAUNCH2025'],
    ['code not valid for the cycle', 'HALF50'],
  ])('%s -> 400 invalid_promocode', async (_name, code) => {
    const res = await placeOrder(stack, c, { product: 'vps-l', billing_cycle: 'annually', promo_code: code });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_promocode', param: 'promo_code' });
  });

  it('checks a promo code again where it is consumed: parallel orders never exceed max_uses', async () => {
    await stack.db('promo_codes').insert({ code: 'RACE3', percent_off: 10, max_uses: 3 });
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => placeOrder(stack, c, { product: 'dns-zone', options: { zone: `race${i}.example` }, promo_code: 'RACE3' })),
    );
    expect(answers.filter((r) => r.status === 202)).toHaveLength(3);
    const refused = answers.filter((r) => r.status !== 202);
    expect(refused).toHaveLength(5);
    for (const r of refused)
      expect(r.body.error).toMatchObject({ code: 'invalid_promocode', param: 'promo_code', message: 'The promo code has been used up.' });
    expect((await stack.db('promo_codes').where({ code: 'RACE3' }).first()).uses).toBe(3);
    expect(await stack.db('orders').where({ account_id: c.accountId, promo_code: 'RACE3' })).toHaveLength(3);

    // A code switched off or expired after the first check is refused where it is consumed too.
    const billing = stack.api.deps.providers.billing;
    const product = (await billing.getProduct('dns-zone', 'EUR'))!;
    await stack.db('promo_codes').insert([
      { code: 'SWITCHEDOFF', percent_off: 10, active: false },
      { code: 'JUSTEXPIRED', percent_off: 10, expires_at: new Date(Date.now() - 1000) },
    ]);
    for (const [code, reason] of [
      ['SWITCHEDOFF', 'is not a valid promo code'],
      ['JUSTEXPIRED', 'has expired'],
    ]) {
      const outcome = await stack.db.transaction((trx) =>
        createOrder(trx, billing, {
          accountId: c.accountId,
          operationId: `op_${code}`,
          product,
          billingCycle: 'monthly',
          options: { zone: 'late.example' },
          promoCode: code,
          siteName: null,
          paymentMethod: 'card',
          currency: 'EUR',
          credentialId: null,
        }),
      );
      expect(outcome).toEqual({ refused: 'promo', reason });
    }
  });

  it('refuses a site name already used by a live service -> 400 hostname_taken', async () => {
    const other = await newCustomer(stack);
    await createService(stack.db, other.accountId, { family: 'other', label: 'taken.example.test', product: 'wordpress-starter' });
    const res = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'Taken.Example.Test' });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'hostname_taken', param: 'site_name' });
    // A terminated service no longer holds its name.
    await stack.db('services').where({ label: 'taken.example.test' }).update({ status: 'terminated' });
    const again = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'taken.example.test' });
    expect(again.status, again.text).toBe(202);
  });
});

describe('orders settled at once', () => {
  it('a free product: running at once, then succeeded with result.service (service.active emitted)', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'free.example' } });
    expect(res.status, res.text).toBe(202);
    expect(OperationSchema.safeParse(res.body).success).toBe(true);
    expect(res.body).toMatchObject({ type: 'orders.create', status: 'pending', resource: { object: 'order' } });
    expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
    const orderId = res.body.resource.id;
    expect(res.body.result.order.id).toBe(orderId);

    const running = await waitFor(
      () => storedOperation(stack, res.body.id),
      (op) => op.status !== 'pending',
    );
    expect(['running', 'succeeded']).toContain(running.status);
    expect(running.result.invoice).toMatchObject({ status: 'paid', total: 0, payment_url: null });

    await result(res.body.id);
    const done = await getOp(c, res.body.id);
    expect(done.body).toMatchObject({ status: 'succeeded', progress: 100, error: null });
    expect(done.body.result.invoice).toEqual({ id: expect.stringMatching(/^inv_\d+$/), status: 'paid', total: 0, currency: 'EUR', payment_url: null });
    expect(done.body.result.service).toMatchObject({ object: 'service', family: 'dns', status: 'active', name: 'DNS Zone', billing_cycle: 'monthly' });

    const order = await getOrder(c, orderId);
    expect(order.status).toBe(200);
    expect(OrderSchema.safeParse(order.body).success, JSON.stringify(order.body)).toBe(true);
    expect(order.body).toMatchObject({
      id: orderId,
      status: 'active',
      product: 'dns-zone',
      options: { zone: 'free.example' },
      payment_method: 'card',
      operation: res.body.id,
    });
    expect(order.body.invoice).toMatchObject({ status: 'paid', settled_by: 'free', amount_due: 0 });
    expect(order.body.services.map((s: any) => s.id)).toEqual([done.body.result.service.id]);

    const active = await eventsFor(stack, c.accountId, 'service.active');
    expect(active.map((e) => e.data.id)).toEqual([done.body.result.service.id]);
    const completed = (await eventsFor(stack, c.accountId, 'operation.completed')).filter((e) => e.data.id === res.body.id);
    expect(completed).toHaveLength(1);
    const svc = await stack.http.get(`/v1/services/${done.body.result.service.id}`, { token: c.token });
    expect(svc.body).toMatchObject({ status: 'active', family: 'dns' });
  });

  it('account credit that covers the invoice settles it (and is debited)', async () => {
    const c = await newCustomer(stack, { credit: 5 });
    const res = await placeOrder(stack, c, { product: 'objectstorage-250' });
    expect(res.status).toBe(202);
    await result(res.body.id);
    const op = await getOp(c, res.body.id);
    expect(op.body).toMatchObject({
      status: 'succeeded',
      result: { invoice: { status: 'paid', total: 3 }, service: { family: 'objectstorage', status: 'active' } },
    });
    const account = await stack.db('billing_accounts').where({ account_id: c.accountId }).first();
    expect(Number(account.credit)).toBe(2);
    expect((await stack.http.get('/v1/account', { token: c.token })).body.credit).toBe(2);
    const order = await getOrder(c, res.body.resource.id);
    expect(order.body.invoice).toMatchObject({ settled_by: 'credit', credit_applied: 3, total: 3 });
  });

  it('a 100 % promo code settles an invoice larger than the credit', async () => {
    const c = await newCustomer(stack, { credit: 5 });
    const res = await placeOrder(stack, c, { product: 'vps-l', promo_code: 'welcome100', options: { hostname: 'big.example.test' } });
    expect(res.status, res.text).toBe(202);
    await result(res.body.id);
    const op = await getOp(c, res.body.id);
    expect(op.body).toMatchObject({
      status: 'succeeded',
      result: { invoice: { status: 'paid', total: 0 }, service: { family: 'vps', label: 'big.example.test' } },
    });
    expect(op.body.result.service.primary_ip).toMatch(/^198\.51\.100\./);
    const order = await getOrder(c, res.body.resource.id);
    expect(order.body).toMatchObject({ promo_code: 'WELCOME100', invoice: { subtotal: 24, discount: 24, total: 0, settled_by: 'promo' } });
    expect(Number((await stack.db('billing_accounts').where({ account_id: c.accountId }).first()).credit)).toBe(5);
  });

  it('a hidden product can still be ordered by its slug', async () => {
    const c = await newCustomer(stack, { credit: 5 });
    const res = await placeOrder(stack, c, { product: 'vps-staff' });
    expect(res.status, res.text).toBe(202);
    await result(res.body.id);
  });
});

describe('orders that wait for payment', () => {
  it('stays pending with result.invoice.payment_url until paid, then provisions the site', async () => {
    const c = await newCustomer(stack, { credit: 5 });
    const res = await placeOrder(stack, c, {
      product: 'wordpress-starter',
      site_name: 'shop.example.test',
      billing_cycle: 'annually',
      payment_method: 'paypal',
    });
    expect(res.status, res.text).toBe(202);
    const pending = await waitFor(
      () => getOp(c, res.body.id),
      (r) => r.body.result?.invoice !== null,
    );
    expect(pending.body.status).toBe('pending');
    expect(pending.body.result.invoice).toMatchObject({ status: 'unpaid', total: 80, currency: 'EUR' });
    expect(pending.body.result.invoice.payment_url).toMatch(/^https:\/\/.+\/inv_\d+\/pay$/);
    // Credit that does not cover the invoice is left untouched.
    expect(Number((await stack.db('billing_accounts').where({ account_id: c.accountId }).first()).credit)).toBe(5);

    // Nothing moves it on but the payment (an order that did not wait would be running by now).
    await new Promise((r) => setTimeout(r, 500));
    expect((await storedOperation(stack, res.body.id)).status).toBe('pending');

    // The name is held by the pending order.
    const rival = await newCustomer(stack);
    expect((await placeOrder(stack, rival, { product: 'wordpress-starter', site_name: 'shop.example.test' })).body.error.code).toBe('hostname_taken');

    const invoiceId = pending.body.result.invoice.id;
    const paid = await stack.http.post(`/_dev/invoices/${invoiceId}/pay`);
    expect(paid.status, paid.text).toBe(200);
    expect(paid.body).toMatchObject({ id: invoiceId, status: 'paid', payment_url: null, settled_by: 'payment_method' });
    // Paying twice is harmless.
    expect((await stack.http.post(`/_dev/invoices/${invoiceId}/pay`)).status).toBe(200);

    await result(res.body.id);
    const done = await getOp(c, res.body.id);
    expect(done.body).toMatchObject({
      status: 'succeeded',
      result: {
        order: { status: 'active' },
        invoice: { status: 'paid' },
        service: { family: 'other', label: 'shop.example.test', status: 'active', billing_cycle: 'annually' },
      },
    });
    const order = await getOrder(c, res.body.resource.id);
    expect(order.body).toMatchObject({ status: 'active', payment_method: 'paypal', site_name: 'shop.example.test' });
    expect(order.body.services[0].next_due_date).toBe(
      new Date(Date.UTC(new Date().getUTCFullYear() + 1, new Date().getUTCMonth(), new Date().getUTCDate())).toISOString().slice(0, 10),
    );
    expect((await placeOrder(stack, rival, { product: 'wordpress-starter', site_name: 'shop.example.test' })).body.error.code).toBe('hostname_taken');
  });

  it('answers 404 for an unknown invoice', async () => {
    expect((await stack.http.post('/_dev/invoices/inv_999999/pay')).status).toBe(404);
    expect((await stack.http.post('/_dev/invoices/garbage/pay')).status).toBe(404);
  });
});

describe('cancel', () => {
  it('voids an unpaid order at once; its operation fails with order_cancelled', async () => {
    const c = await newCustomer(stack, { credit: 0 });
    const usesBefore = (await stack.db('promo_codes').where({ code: 'HALF50' }).first()).uses;
    const res = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'gone.example.test', promo_code: 'HALF50' });
    const pending = await waitFor(
      () => getOp(c, res.body.id),
      (r) => r.body.result?.invoice !== null,
    );
    expect(pending.body.status).toBe('pending');
    const orderId = res.body.resource.id;

    const promoUses = async () => (await stack.db('promo_codes').where({ code: 'HALF50' }).first()).uses;
    expect(await promoUses()).toBe(usesBefore + 1);
    expect(pending.body.result.invoice.total).toBe(4);
    const cancelled = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token });
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.body).toMatchObject({
      id: orderId,
      status: 'cancelled',
      invoice: { status: 'cancelled', payment_url: null, amount_due: 0 },
      services: [],
    });
    expect(cancelled.body.cancelled_at).not.toBeNull();
    expect(await promoUses()).toBe(usesBefore); // the voided order gives its promo use back

    await result(res.body.id);
    const op = await getOp(c, res.body.id);
    expect(op.body).toMatchObject({ status: 'failed', error: { code: 'order_cancelled' }, result: { invoice: { status: 'cancelled' } } });
    expect((await eventsFor(stack, c.accountId, 'operation.completed')).filter((e) => e.data.id === res.body.id)).toHaveLength(1);

    // Cancelling again is harmless; paying a voided invoice is refused; the site name is free again.
    expect((await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token })).body.status).toBe('cancelled');
    const pay = await stack.http.post(`/_dev/invoices/${pending.body.result.invoice.id}/pay`);
    expect(pay.status).toBe(409);
    expect(pay.body.error.code).toBe('conflict');
    expect((await stack.db('services').where({ account_id: c.accountId })).length).toBe(0);
    const again = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'gone.example.test' });
    expect(again.status, again.text).toBe(202);
  });

  it('records a cancellation request per service of an active order; nothing is destroyed', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'keep.example' } });
    await result(res.body.id);
    const orderId = res.body.resource.id;

    const eoc = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { reason: 'moving on' } });
    expect(eoc.status, eoc.text).toBe(200);
    expect(eoc.body).toMatchObject({ status: 'active', cancellation: { type: 'end_of_cycle', reason: 'moving on' } });
    const service = eoc.body.services[0];
    expect(service).toMatchObject({ status: 'active', cancellation: { type: 'end_of_cycle', effective_date: service.next_due_date } });

    const now = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { type: 'immediate' } });
    expect(now.body.services[0]).toMatchObject({
      status: 'active',
      cancellation: { type: 'immediate', effective_date: new Date().toISOString().slice(0, 10) },
    });
    expect(
      (
        await stack
          .db('services')
          .where({ id: Number(service.id.slice(4)) })
          .first()
      ).status,
    ).toBe('active');
    expect((await stack.http.get(`/v1/services/${service.id}`, { token: c.token })).body.status).toBe('active');

    const bad = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { type: 'yesterday' } });
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'type' });
  });
});

describe('activation timeout', () => {
  it('fails with provisioning_timeout when the service never becomes active', async () => {
    const c = await newCustomer(stack);
    expect((await stack.http.post('/_dev/backends/dns/outage', { body: { down: true } })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 300)); // the worker's switchboard caches the switch for 200 ms
    try {
      const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'never.example' } });
      expect(res.status).toBe(202);
      const running = await waitFor(
        () => storedOperation(stack, res.body.id),
        (op) => op.status === 'running',
      );
      expect(running.status).toBe('running');
      const started = Date.now();
      await result(res.body.id);
      expect(Date.now() - started).toBeGreaterThan(3_000); // the 4 s timeout, less the poll that saw it running
      const op = await getOp(c, res.body.id);
      expect(op.body).toMatchObject({ status: 'failed', error: { code: 'provisioning_timeout' }, result: { invoice: { status: 'paid' } } });
      const order = await getOrder(c, res.body.resource.id);
      expect(order.body.services[0].status).toBe('pending');
      expect(await eventsFor(stack, c.accountId, 'service.active')).toHaveLength(0);
    } finally {
      await stack.http.post('/_dev/backends/dns/outage', { body: { down: false } });
    }
  });
});

describe('billing outage', () => {
  it('accepts the order, waits for billing to answer, and refuses to void meanwhile (503)', async () => {
    const c = await newCustomer(stack);
    await stack.http.post('/_dev/backends/billing/outage', { body: { down: true } });
    await new Promise((r) => setTimeout(r, 300)); // the worker's switchboard caches the switch for 200 ms
    try {
      // Reads and validation come from the control plane's own records.
      expect((await stack.http.get('/v1/orders/products', { token: c.token })).status).toBe(200);
      expect((await placeOrder(stack, c, { product: 'teleporter' })).body.error.code).toBe('validation_failed');
      const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'outage.example' } });
      expect(res.status, res.text).toBe(202);
      // Billing refused the order's first call; the workflow retries it (in 1 s, then longer).
      const handle = stack.temporal!.client.workflow.getHandle(res.body.id);
      const retried = await waitFor(
        async () => (await handle.describe()).raw.pendingActivities ?? [],
        (pending) => pending.some((a) => a.activityType?.name === 'placeOrder' && a.lastFailure),
      );
      expect(retried.find((a) => a.activityType?.name === 'placeOrder')?.lastFailure?.message).toMatch(/billing/i);
      const op = await storedOperation(stack, res.body.id);
      expect(op).toMatchObject({ status: 'pending', result: { invoice: null } });
      const order = await getOrder(c, res.body.resource.id);
      expect(order.body).toMatchObject({ status: 'pending', invoice: null });
      const cancel = await stack.http.post(`/v1/orders/${res.body.resource.id}/cancel`, { token: c.token });
      expect(cancel.status).toBe(503);
      expect(cancel.body.error.code).toBe('backend_unavailable');

      await stack.http.post('/_dev/backends/billing/outage', { body: { down: false } });
      await result(res.body.id);
      expect(await storedOperation(stack, res.body.id)).toMatchObject({ status: 'succeeded', result: { invoice: { status: 'paid' } } });
    } finally {
      await stack.http.post('/_dev/backends/billing/outage', { body: { down: false } });
    }
  });
});

describe('idempotency', () => {
  it('replays POST /v1/orders with the same key: same operation, Idempotent-Replayed: true', async () => {
    const c = await newCustomer(stack);
    const key = randomUUID();
    const body = { product: 'dns-zone', options: { zone: 'replay.example' } };
    const first = await placeOrder(stack, c, body, key);
    expect(first.status).toBe(202);
    const second = await placeOrder(stack, c, body, key);
    expect(second.status).toBe(202);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('location')).toBe(first.headers.get('location'));
    expect(second.body.id).toBe(first.body.id);
    expect(await stack.db('orders').where({ account_id: c.accountId })).toHaveLength(1);
    const reused = await placeOrder(stack, c, { ...body, billing_cycle: 'annually' }, key);
    expect(reused.status).toBe(422);
    expect(reused.body.error.code).toBe('idempotency_key_reused');
    await result(first.body.id);
  });

  it('concurrent identical requests create one order', async () => {
    const c = await newCustomer(stack);
    const key = randomUUID();
    const body = { product: 'dns-zone', options: { zone: 'race.example' } };
    const answers = await Promise.all(Array.from({ length: 6 }, () => placeOrder(stack, c, body, key)));
    for (const a of answers) expect([202, 409]).toContain(a.status);
    for (const a of answers.filter((x) => x.status === 409)) expect(a.body.error.code).toBe('idempotency_key_in_use');
    const ids = new Set(answers.filter((a) => a.status === 202).map((a) => a.body.id));
    expect(ids.size).toBe(1);
    expect(await stack.db('orders').where({ account_id: c.accountId })).toHaveLength(1);
    expect(await stack.db('operations').where({ account_id: c.accountId, type: 'orders.create' })).toHaveLength(1);
    await result([...ids][0]);
  });

  it('two different keys racing for one site name: one order, the other hostname_taken', async () => {
    const a = await newCustomer(stack);
    const b = await newCustomer(stack);
    const body = { product: 'wordpress-starter', site_name: 'contested.example.test' };
    const answers = await Promise.all([placeOrder(stack, a, body), placeOrder(stack, b, body)]);
    expect(answers.map((r) => r.status).sort()).toEqual([202, 400]);
    expect(answers.find((r) => r.status === 400)!.body.error.code).toBe('hostname_taken');
    expect(await stack.db('orders').where({ site_name: 'contested.example.test' })).toHaveLength(1);
  });
});

describe('billing moves the service', () => {
  it('suspend, unsuspend and terminate change the status and emit service.* events', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'moves.example' } });
    await result(res.body.id);
    const serviceId = (await getOp(c, res.body.id)).body.result.service.id;

    expect((await stack.http.post(`/_dev/services/${serviceId}/suspend`)).body.status).toBe('suspended');
    expect((await stack.http.get(`/v1/services/${serviceId}`, { token: c.token })).body.status).toBe('suspended');
    expect((await stack.http.post(`/_dev/services/${serviceId}/unsuspend`)).body.status).toBe('active');
    expect((await stack.http.post(`/_dev/services/${serviceId}/terminate`)).body.status).toBe('terminated');

    const types = (await stack.db('events').where({ account_id: c.accountId }).whereLike('type', 'service.%').orderBy('created_at')).map((e) => [
      e.type,
      e.data.id,
      e.data.status,
    ]);
    expect(types).toEqual([
      ['service.active', serviceId, 'active'], // first activation
      ['service.suspended', serviceId, 'suspended'],
      ['service.active', serviceId, 'active'], // unsuspension
      ['service.terminated', serviceId, 'terminated'],
    ]);
    const order = await getOrder(c, res.body.resource.id);
    expect(order.body.services[0].status).toBe('terminated');
  });
});

describe('reading orders, visibility and scopes', () => {
  it("lists the account's orders newest first, filtered by status", async () => {
    const c = await newCustomer(stack);
    const a = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'one.example' } });
    const b = await placeOrder(stack, c, { product: 'lb-s' });
    await result(a.body.id);
    await waitFor(
      () => storedOperation(stack, b.body.id),
      (op) => op.result?.invoice !== null,
    );
    const all = await stack.http.get('/v1/orders', { token: c.token });
    expect(all.body.data.map((o: any) => o.id)).toEqual([b.body.resource.id, a.body.resource.id]);
    for (const o of all.body.data) expect(OrderSchema.safeParse(o).success).toBe(true);
    const pending = await stack.http.get('/v1/orders?status=pending', { token: c.token });
    expect(pending.body.data.map((o: any) => o.id)).toEqual([b.body.resource.id]);
    const paged = await stack.http.get('/v1/orders?limit=1', { token: c.token });
    expect(paged.body).toMatchObject({ has_more: true });
    const next = await stack.http.get(`/v1/orders?limit=1&cursor=${encodeURIComponent(paged.body.next_cursor)}`, { token: c.token });
    expect(next.body.data.map((o: any) => o.id)).toEqual([a.body.resource.id]);
    await stack.http.post(`/v1/orders/${b.body.resource.id}/cancel`, { token: c.token });
  });

  it("another account's order is 404 (read and cancel), as are malformed ids", async () => {
    const owner = await newCustomer(stack);
    const stranger = await newCustomer(stack);
    const res = await placeOrder(stack, owner, { product: 'lb-s' });
    const orderId = res.body.resource.id;
    for (const [method, path] of [
      ['GET', `/v1/orders/${orderId}`],
      ['POST', `/v1/orders/${orderId}/cancel`],
      ['GET', '/v1/orders/ord_999999'],
      ['GET', '/v1/orders/not-an-id'],
    ]) {
      const r = await stack.http.request(method, path, { token: stranger.token });
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    }
    expect((await stack.http.get('/v1/orders', { token: stranger.token })).body.data).toEqual([]);
    // The id works without its prefix for the owner.
    expect((await stack.http.get(`/v1/orders/${orderId.slice(4)}`, { token: owner.token })).body.id).toBe(orderId);
    expect((await getOrder(owner, orderId)).body.status).toBe('pending');
    await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: owner.token });
  });

  it('needs orders:read to read and orders:write to order or cancel', async () => {
    const c = await newCustomer(stack);
    const reader = await createApiKey(stack.db, c.accountId, c.userId, { scopes: ['orders:read'] });
    const nobody = await createApiKey(stack.db, c.accountId, c.userId, { scopes: ['services:read'] });
    const denied = await stack.http.post('/v1/orders', { token: reader.token, body: { product: 'lb-s' }, headers: { 'idempotency-key': randomUUID() } });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'orders:write' });
    expect((await stack.http.post('/v1/orders/ord_1/cancel', { token: reader.token })).body.error.required_scope).toBe('orders:write');
    expect((await stack.http.get('/v1/orders/products', { token: reader.token })).status).toBe(200);
    for (const path of ['/v1/orders', '/v1/orders/products', '/v1/orders/payment-methods', '/v1/orders/ord_1']) {
      const r = await stack.http.get(path, { token: nobody.token });
      expect(r.status, path).toBe(403);
      expect(r.body.error.required_scope).toBe('orders:read');
    }
    expect((await stack.http.get('/v1/orders')).status).toBe(401);
  });

  it("answers 404 to a cancel from a key or user that cannot see the order's service, and changes nothing", async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'cancel-hidden.example' } });
    await result(res.body.id);
    const orderId = res.body.resource.id;
    const unrelated = await createService(stack.db, c.accountId, { family: 'dns' });
    const narrowKey = await createApiKey(stack.db, c.accountId, c.userId, { scopes: ['orders:write', 'orders:read'], allowlist: [unrelated.serviceId] });
    const user = await createUser(stack.db, c.accountId, { scopes: ['orders:write', 'orders:read'], serviceIds: [unrelated.serviceId] });
    const userKey = await createApiKey(stack.db, c.accountId, user.userId, { scopes: ['orders:write'] });
    for (const token of [narrowKey.token, userKey.token]) {
      const cancel = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token, body: { type: 'immediate' } });
      expect(cancel.status, cancel.text).toBe(404);
      expect(cancel.body.error.code).toBe('not_found');
    }
    expect(
      (
        await stack
          .db('orders')
          .where({ id: Number(orderId.slice(4)) })
          .first()
      ).cancellation_type,
    ).toBeNull();
    expect((await getOrder(c, orderId)).body.cancellation).toBeNull();
  });

  it('hides an order, and its operation, from a key that cannot see the service it created (docs/security.md)', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'hidden.example' } });
    await result(res.body.id);
    const created = (await getOrder(c, res.body.resource.id)).body.services[0];
    const unrelated = await createService(stack.db, c.accountId, { family: 'dns' });
    const narrow = await createApiKey(stack.db, c.accountId, c.userId, { scopes: ['orders:read', 'operations:read'], allowlist: [unrelated.serviceId] });
    const seen = await stack.http.get(`/v1/orders/${res.body.resource.id}`, { token: narrow.token });
    expect(seen.status).toBe(404);
    expect((await stack.http.get('/v1/orders', { token: narrow.token })).body.data).toEqual([]);
    // The order's operation took the service it created: it follows that service's visibility.
    expect((await stack.db('operations').where({ id: res.body.id }).first()).service_id).toBe(Number(created.id.slice(4)));
    expect((await stack.http.get(`/v1/operations/${res.body.id}`, { token: narrow.token })).status).toBe(404);
    expect((await stack.http.get('/v1/operations', { token: narrow.token })).body.data).toEqual([]);
    const completed = (await eventsFor(stack, c.accountId, 'operation.completed')).find((e) => e.data.id === res.body.id);
    expect(completed.service_id).toBe(Number(created.id.slice(4)));
    // A key that sees the service sees the order and its operation.
    const wide = await createApiKey(stack.db, c.accountId, c.userId, { scopes: ['orders:read', 'operations:read'], allowlist: [Number(created.id.slice(4))] });
    expect((await stack.http.get(`/v1/orders/${res.body.resource.id}`, { token: wide.token })).body.services.map((s: { id: string }) => s.id)).toEqual([
      created.id,
    ]);
    expect((await stack.http.get(`/v1/operations/${res.body.id}`, { token: wide.token })).status).toBe(200);
  });
});
