import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import type { AnyRoute } from '../api/route';
import { buildRouteTable } from '../api/routes';
import { families } from '../families';
import { skeletonFamily } from './fixtures/skeleton-family/manifest';
import { createAccount, createService } from './helpers/fixtures';
import { until } from './helpers/processes';
import { startStack, type Stack } from './helpers/stack';

/**
 * The skeleton family (test/fixtures/skeleton-family/, the one docs/adding-a-family.md says to copy)
 * compiles and runs: mounted in a test stack through its manifest alone, its three preset routes
 * answer, and its operation runs to `succeeded` on the real Temporal dev server.
 */
let stack: Stack;
let serviceId: string;

/** The skeleton's routes are not in the product's table, which the shared response check reads: checked here against their own declarations. */
function checkAgainstSkeleton(method: string, path: string, status: number, body: unknown): void {
  const route = skeletonFamily.routes.find((r: AnyRoute) => r.method === method && new RegExp(`^${r.path.replace(/\{[a-z_]+\}/g, '[^/]+')}$`).test(path));
  expect(route, `${method} ${path} is a skeleton route`).toBeDefined();
  if (status >= 400) return;
  const spec = route!.responses.find((r: { status: number }) => r.status === status);
  expect(spec, `${route!.operationId} declares ${status}`).toBeDefined();
  if (spec!.schema) (spec!.schema as z.ZodType).parse(body);
}

async function call(method: 'get' | 'post', path: string, body?: unknown) {
  const res = await stack.http.request(method.toUpperCase(), path, { token: stack.owner.key, body, checkContract: false });
  checkAgainstSkeleton(method, path, res.status, res.body);
  return res;
}

beforeAll(async () => {
  stack = await startStack({ families: [...families, skeletonFamily] });
  ({ id: serviceId } = await createService(stack.db, stack.owner.accountId, {
    family: 'other',
    product: 'skeleton-basic',
    capabilities: { items: true, polish: true },
  }));
  await stack
    .db('services')
    .where({ id: Number(serviceId.slice(4)) })
    .update({ product_family: 'skeleton' });
  // The family's seed gives the service its backend resources, as `npm start` would.
  const { deps } = stack.api;
  await skeletonFamily.seed({ db: deps.db, providers: deps.providers, keyring: deps.keyring, config: deps.config, apiPort: 0 });
});

afterAll(async () => {
  await stack?.close();
});

describe('the skeleton family', () => {
  it('is not in the product: the route table without it has no skeleton route', () => {
    expect(buildRouteTable({ devEndpoints: true }).filter((r) => r.path.startsWith('/v1/skeleton'))).toEqual([]);
    expect(families.map((f) => f.name)).not.toContain('skeleton');
  });

  it('mounted through its manifest: the backend list, the synchronous write and their refusals', async () => {
    const seeded = await call('get', `/v1/skeleton/${serviceId}/items`);
    expect(seeded.status).toBe(200);
    expect(seeded.body.data.map((i: { name: string }) => i.name)).toEqual(['welcome']);

    const added = await call('post', `/v1/skeleton/${serviceId}/items`, { name: 'first' });
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({ object: 'skeleton_item', name: 'first', polished: false });

    // The backend's refusal, mapped once for every family: 409 with the provider's message.
    const again = await call('post', `/v1/skeleton/${serviceId}/items`, { name: 'first' });
    expect(again.status).toBe(409);
    expect(again.body.error.message).toContain('exists already');

    const bad = await call('post', `/v1/skeleton/${serviceId}/items`, { name: 'Not A Name' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe('name');

    // findTarget's order: invisible is 404, a false capability 400, a suspended service 409.
    const other = await createAccount(stack.db);
    const { id: foreign } = await createService(stack.db, other.accountId, { family: 'other', capabilities: { items: true, polish: true } });
    expect((await call('get', `/v1/skeleton/${foreign}/items`)).status).toBe(404);
    const { id: narrow } = await createService(stack.db, stack.owner.accountId, { family: 'other', capabilities: { items: true } });
    expect((await call('post', `/v1/skeleton/${narrow}/polish`)).body.error.code).toBe('unsupported_for_product');
    const { id: suspended } = await createService(stack.db, stack.owner.accountId, { family: 'other', status: 'suspended', capabilities: { items: true } });
    expect((await call('post', `/v1/skeleton/${suspended}/items`, { name: 'x' })).status).toBe(409);
  });

  it('runs its asynchronous action to succeeded on the Temporal dev server', async () => {
    const res = await call('post', `/v1/skeleton/${serviceId}/polish`);
    expect(res.status).toBe(202);
    expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
    expect(res.body).toMatchObject({ type: 'skeleton.polish', resource: { object: 'skeleton', id: serviceId } });

    let op: any;
    await until('the skeleton.polish operation to end', async () => {
      op = (await stack.http.request('GET', `/v1/operations/${res.body.id}`, { token: stack.owner.key })).body;
      return op.status === 'succeeded' || op.status === 'failed';
    });
    expect(op).toMatchObject({ status: 'succeeded', progress: 100, result: { items_polished: 2 } });
    const items = await call('get', `/v1/skeleton/${serviceId}/items`);
    expect(items.body.data.map((i: { polished: boolean }) => i.polished)).toEqual([true, true]);
  });
});
