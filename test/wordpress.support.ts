import { randomBytes } from 'node:crypto';
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
