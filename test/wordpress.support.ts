import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { DEFAULT_CAPABILITIES } from '../domain/capabilities';
import { provisionTargetOf } from '../domain/provisioning';
import { WordpressProvisioner } from '../domain/wordpress/provisioner';
import type { Stack } from './helpers/stack';

/**
 * What the hosted-site tests share: a site of the caller's account built as an order builds it
 * (the family's provisioner over the stack's backends: the simulator unless the test asks for
 * WORDPRESS_BACKEND=local), and a small client for its endpoints.
 */
export interface TestSite {
  id: string;
  serviceId: number;
  name: string;
}

export async function createSite(
  stack: Stack,
  opts: { name?: string; accountId?: number; status?: string; capabilities?: Record<string, boolean> } = {},
): Promise<TestSite> {
  const name = opts.name ?? `site-${randomBytes(4).toString('hex')}.example.test`;
  const [row] = await stack
    .db('services')
    .insert({
      account_id: opts.accountId ?? stack.owner.accountId,
      family: 'other',
      product: 'wordpress-starter',
      product_family: 'wordpress',
      status: opts.status ?? 'active',
      name: 'WordPress Starter',
      label: name,
      billing_cycle: 'monthly',
      next_due_date: '2030-01-01',
      capabilities: JSON.stringify(opts.capabilities ?? DEFAULT_CAPABILITIES.wordpress),
    })
    .returning('id');
  const serviceId = Number(row.id);
  const provisioner = new WordpressProvisioner(stack.db, stack.api.deps.providers, stack.api.deps.keyring);
  await provisioner.provision((await provisionTargetOf(stack.db, serviceId))!);
  return { id: `svc_${serviceId}`, serviceId, name };
}

/** The owner's client for one stack. */
export function siteApi(stack: Stack, token = stack.owner.key) {
  return {
    get: (p: string) => stack.http.get(p, { token }),
    post: (p: string, body?: unknown, headers?: Record<string, string>) => stack.http.post(p, { token, body, headers }),
    put: (p: string, body?: unknown) => stack.http.request('PUT', p, { token, body }),
    patch: (p: string, body?: unknown) => stack.http.request('PATCH', p, { token, body }),
    del: (p: string) => stack.http.request('DELETE', p, { token }),
  };
}

/** The port of the sites' nginx (WORDPRESS_BACKEND=local). */
export const sitesPort = (stack: Stack): number =>
  (stack.api.deps.providers.wordpress as unknown as { nginx: { settings(): { port: number } } }).nginx.settings().port;

/** GET (or any method) through the sites' nginx with `Host: host`, on a connection of its own. */
export function viaNginx(
  stack: Stack,
  host: string,
  urlPath = '/',
  opts: { method?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: sitesPort(stack), path: urlPath, method: opts.method ?? 'GET', headers: { host, ...opts.headers }, agent: false },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
