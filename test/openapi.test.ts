import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { buildRouteTable } from '../api/routes';
import { startStack, type Stack } from './helpers/stack';

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

describe('GET /v1/openapi.json', () => {
  it('is public OpenAPI 3.1', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
  });

  it('lints without errors under the recommended ruleset', async () => {
    const config = await createConfig({ extends: ['recommended'], rules: { 'info-license': 'off', 'info-license-url': 'off' } });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: 'openapi.json', config });
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

  it('leaves the development stand-ins and health checks out', () => {
    expect(Object.keys(doc.paths).some((p) => p.startsWith('/_dev') || p === '/healthz')).toBe(false);
  });
});
