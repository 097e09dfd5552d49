import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { z } from 'zod';
import { buildRouteTable } from '../api/routes';
import { GRANTABLE_TO_KEYS } from '../domain/scopes';
import { SUBSCRIBABLE_EVENTS } from '../domain/webhooks/webhooks';
import { startStack, type Stack } from './helpers/stack';
import { newZone } from './dns.support';

/** The OpenAPI document is generated from the route table; it must lint clean and list every route. */
let stack: Stack;
let doc: any;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  const res = await stack.http.get('/v1/openapi.json');
  expect(res.status).toBe(200);
  doc = res.body;
});
afterAll(() => stack?.close());

/** Every `enum` list in a JSON schema or an operation of the document, `$ref`s followed. */
function enumsIn(node: unknown, seen = new Set<unknown>()): string[][] {
  if (node === null || typeof node !== 'object' || seen.has(node)) return [];
  seen.add(node);
  const { $ref, enum: values } = node as { $ref?: string; enum?: unknown };
  const here = Array.isArray(values) ? [values.map(String)] : [];
  const target = typeof $ref === 'string' && $ref.startsWith('#/components/schemas/') ? doc.components.schemas[$ref.split('/').pop()!] : undefined;
  return [...here, ...enumsIn(target, seen), ...Object.values(node).flatMap((child) => enumsIn(child, seen))];
}

describe('GET /v1/openapi.json', () => {
  it('is public OpenAPI 3.1', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
  });

  it('lints without errors under the recommended ruleset', async () => {
    const config = await createConfig({ extends: ['recommended'], rules: { 'info-license': 'off', 'info-license-url': 'off' } });
    // DECISIONS gives the recipe registry paths beside the site paths: `/v1/wordpress/recipes/{name}` and
    // `/v1/wordpress/{id}/php` both match `/v1/wordpress/recipes/php` on paper. No site id is `recipes`
    // (they are `svc_<n>`), and the router lists the recipe routes first (api/routes/wordpress/routes.ts).
    const knownAmbiguity = (p: { ruleId: string; message: string }) =>
      p.ruleId === 'no-ambiguous-paths' && p.message.includes('`/v1/wordpress/recipes/') && p.message.includes('`/v1/wordpress/{id}/');
    const problems = (await lintFromString({ source: JSON.stringify(doc), absoluteRef: 'openapi.json', config })).filter((p) => !knownAmbiguity(p));
    const errors = problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(errors).toEqual([]);
    const warnings = problems.filter((p) => p.severity === 'warn').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(warnings).toEqual([]);
  });

  it('documents every public route with its scope, marks and credential rule', () => {
    const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal);
    for (const route of routes) {
      const op = doc.paths[route.path]?.[route.method];
      expect(op, `${route.method.toUpperCase()} ${route.path}`).toBeDefined();
      expect(op.operationId).toBe(route.operationId);
      expect(op['x-cloud-marks']).toEqual(route.marks);
      expect(op['x-cloud-scope']).toBe(route.scope);
      expect(op['x-cloud-async']).toBe(route.marks.includes('A'));
      if (route.credential === 'none') expect(op.security).toEqual([]);
      else expect(op.security).toEqual([{ bearer: route.scope ? [route.scope] : [] }]);
    }
    const documented = Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods as object).map((m) => `${m} ${path}`));
    expect(documented.sort()).toEqual(routes.map((r) => `${r.method} ${r.path}`).sort());
  });

  it('documents the errors the shared pipeline answers: 409/422 on mutations, 413/415 with a body, 503 on credentialed routes', () => {
    const errorRef = { $ref: '#/components/schemas/Error' };
    const statuses = (method: string, path: string) => doc.paths[path][method].responses;
    for (const [method, path] of [
      ['patch', '/v1/webhooks/{id}'],
      ['post', '/v1/orders'],
      ['delete', '/v1/vps/{id}/backups/{backup_id}'],
      ['post', '/v1/vps/{id}/power'],
    ]) {
      for (const status of ['409', '422', '503']) {
        expect(statuses(method, path)[status]?.content['application/json'].schema, `${method} ${path} ${status}`).toEqual(errorRef);
      }
    }
    for (const [method, path] of [
      ['post', '/v1/sessions'],
      ['patch', '/v1/vps/{id}'],
      ['post', '/v1/webhooks'],
    ]) {
      expect(Object.keys(statuses(method, path))).toEqual(expect.arrayContaining(['413', '415']));
    }
    // Secret-returning calls are never replayed, so never 422; a GET is never a conflict over an Idempotency-Key.
    expect(statuses('post', '/v1/webhooks/{id}/rotate-secret')['422']).toBeUndefined();
    expect(statuses('get', '/v1/services/{id}')['409']).toBeUndefined();
    // A VPS read that needs the machine is a conflict while it has none.
    expect(statuses('get', '/v1/vps/{id}/config')['409'].content['application/json'].schema).toEqual(errorRef);
    expect(statuses('get', '/v1/openapi.json')['503']).toBeUndefined();
  });

  it('declares the 409 of a DNS read whose zone is gone from the DNS server (a second checkout, a zone deleted there)', async () => {
    const { zone } = await newZone(stack, 'gone-from-server.test');
    await stack.api.deps.providers.dns.deleteZone(zone);
    for (const [path, docPath] of [
      [`/v1/dns/zones/${zone}/export`, '/v1/dns/zones/{zone}/export'],
      [`/v1/dns/zones/${zone}/records`, '/v1/dns/zones/{zone}/records'],
      [`/v1/dns/zones/${zone}/records/www/A`, '/v1/dns/zones/{zone}/records/{name}/{type}'],
    ]) {
      const res = await stack.http.get(path, { token: stack.owner.key });
      expect(res.status, `${path}: ${res.text}`).toBe(409);
      expect(res.body.error).toMatchObject({ code: 'conflict', message: expect.stringContaining('not on the dns backend any more') });
      expect(doc.paths[docPath].get.responses['409']?.content['application/json'].schema, docPath).toEqual({ $ref: '#/components/schemas/Error' });
    }
    // The zone itself still reads: its live fields are null when the server cannot give them.
    expect((await stack.http.get(`/v1/dns/zones/${zone}`, { token: stack.owner.key })).status).toBe(200);
  });

  it('is no looser than the validators: Idempotency-Key 1 to 255 characters, a body required only when `{}` is refused', () => {
    const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal);
    for (const route of routes) {
      const op = doc.paths[route.path][route.method];
      const key = (op.parameters ?? []).find((p: any) => p.name === 'Idempotency-Key');
      if (key) expect(key.schema, `${route.method} ${route.path}`).toEqual({ type: 'string', minLength: 1, maxLength: 255 });
      // api/app.ts validates a request without a body as `{}`.
      if (route.body) expect(op.requestBody.required, `${route.method} ${route.path}`).toBe(!route.body.safeParse({}).success);
    }
    // Every field of a webhook update is optional; a new webhook needs its url and events.
    expect(doc.paths['/v1/webhooks/{id}'].patch.requestBody.required).toBe(false);
    expect(doc.paths['/v1/webhooks'].post.requestBody.required).toBe(true);
  });

  it('declares every enum a validator has: scopes of a key, webhook event types, every other enum field', () => {
    const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal);
    let checked = 0;
    for (const route of routes) {
      const declared = enumsIn(doc.paths[route.path][route.method]);
      for (const part of [route.body, route.query, route.params]) {
        if (!part) continue;
        for (const values of enumsIn(z.toJSONSchema(part, { io: 'input', unrepresentable: 'any' }))) {
          expect(declared, `${route.method} ${route.path}: ${values.join('|')}`).toContainEqual(values);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThanOrEqual(20);
    const body = (method: string, path: string) => doc.paths[path][method].requestBody.content['application/json'].schema;
    const items = (schema: any, field: string) => enumsIn(schema.properties[field].items)[0];
    expect(items(body('post', '/v1/api-keys'), 'scopes')).toEqual(GRANTABLE_TO_KEYS);
    expect(items(body('patch', '/v1/api-keys/{id}'), 'scopes')).toEqual(GRANTABLE_TO_KEYS);
    expect(items(body('post', '/v1/webhooks'), 'events')).toEqual(SUBSCRIBABLE_EVENTS);
    expect(items(body('patch', '/v1/webhooks/{id}'), 'events')).toEqual(SUBSCRIBABLE_EVENTS);
  });

  it('keeps the answers for values outside those enums: each element named, with why it is refused', async () => {
    const key = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'x', scopes: ['services:read', '*', 'vps:*', 'apikeys:read', 'vps:fly', 7] },
    });
    expect(key.status).toBe(400);
    expect(key.body.error).toMatchObject({ type: 'invalid_request_error', code: 'validation_failed', param: 'scopes.1' });
    expect(key.body.error.errors).toEqual([
      { param: 'scopes.1', message: '"*" is not accepted: list concrete scopes' },
      { param: 'scopes.2', message: '"vps:*" is not accepted: list concrete scopes' },
      { param: 'scopes.3', message: '"apikeys:read" is session-only and cannot be granted to an API key' },
      { param: 'scopes.4', message: '"vps:fly" is not a scope of this API (see GET /v1/capabilities)' },
      { param: 'scopes.5', message: 'Invalid input: expected string, received number' },
    ]);
    const hook = await stack.http.post('/v1/webhooks', {
      token: stack.owner.key,
      body: { url: 'https://hooks.example.com/x', events: ['*', 'service.teleported'] },
    });
    expect(hook.status).toBe(400);
    expect(hook.body.error).toMatchObject({ code: 'validation_failed', param: 'events.1' });
    expect(hook.body.error.errors).toEqual([
      { param: 'events.1', message: `"service.teleported" is not an event type (one of ${SUBSCRIBABLE_EVENTS.join(', ')})` },
    ]);
  });

  it('leaves the development stand-ins and health checks out', () => {
    expect(Object.keys(doc.paths).some((p) => p.startsWith('/_dev') || p === '/healthz')).toBe(false);
  });
});
