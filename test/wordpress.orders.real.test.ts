import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/**
 * Ordering a hosted site on real WordPress (WORDPRESS_BACKEND=local, a real MariaDB instance): the
 * order with `site_name` succeeds once the site answers HTTP, its title the site name; a taken name
 * (in any case, with a final dot) is refused before billing; terminating the service removes the
 * site from nginx and its database instance.
 */
let stack: Stack;
const dataDir = mkdtempSync(path.join(tmpdir(), 'wp-orders-'));
chmodSync(dataDir, 0o711);

beforeAll(async () => {
  stack = await startStack({
    temporal: 'dev',
    env: {
      WORDPRESS_BACKEND: 'local',
      WORDPRESS_DATA_DIR: dataDir,
      WORDPRESS_HTTP_PORT: '0',
      DBAAS_BACKEND: 'instances',
      SIM_DELAY_SCALE: '0',
      OPERATION_CACHE_TTL: '100ms',
    },
  });
  await seedOrders(stack.db);
}, 120_000);

afterAll(async () => {
  await (stack?.api.deps.providers.wordpress as unknown as { stopAll(): Promise<void> } | undefined)?.stopAll().catch(() => undefined);
  await stack?.close();
  rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

function page(port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

describe('ordering wordpress-starter', () => {
  it('builds a site that answers HTTP with its name; a taken name is refused; termination removes it', async () => {
    const c = await newCustomer(stack);
    const order = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'Blog.Order-Test.example.', promo_code: 'WELCOME100' });
    expect(order.status, order.text).toBe(202);
    const op = await waitFor(
      () => storedOperation(stack, order.body.id),
      (o) => o.status === 'succeeded' || o.status === 'failed',
      180_000,
      200,
    );
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    const id = op.result.service.id as string;
    expect(op.result.service).toMatchObject({ family: 'other', label: 'blog.order-test.example' });

    const site = await stack.http.get(`/v1/wordpress/${id}`, { token: c.token });
    expect(site.status, site.text).toBe(200);
    expect(site.body).toMatchObject({
      object: 'wordpress_site',
      name: 'blog.order-test.example',
      primary_domain: 'blog.order-test.example',
      url: 'http://blog.order-test.example',
      live: { state: 'up', php_version: '8.2' },
      capabilities: { edgeproxy: false, backups: true, plugins: true },
    });
    const front = await page(site.body.http_port, 'blog.order-test.example');
    expect(front.status).toBe(200);
    expect(/<title>([^<]*)<\/title>/.exec(front.body)?.[1]).toContain('blog.order-test.example');

    // Taken, in any case and with a final dot, by any account.
    const other = await newCustomer(stack);
    const taken = await placeOrder(stack, other, { product: 'wordpress-starter', site_name: 'BLOG.order-test.example.', promo_code: 'WELCOME100' });
    expect(taken.status, taken.text).toBe(400);
    expect(taken.body.error).toMatchObject({ code: 'hostname_taken', param: 'site_name' });

    const serviceId = Number(id.slice(4));
    const instance = (await stack.db('wordpress_sites').where({ service_id: serviceId }).first()).db_instance;
    expect((await stack.http.post(`/_dev/services/${id}/terminate`, { body: {} })).status).toBe(200);
    await waitFor(
      () => stack.db('wordpress_sites').where({ service_id: serviceId }),
      (rows) => rows.length === 0,
      60_000,
      200,
    );
    expect((await page(site.body.http_port, 'blog.order-test.example')).status).toBe(404);
    await expect(stack.api.deps.providers.dbaas.status(instance)).rejects.toThrow();
  }, 300_000);
});
