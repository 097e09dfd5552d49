import { createApiKey, createService, createUser } from './helpers/fixtures';
import { provisionTargetOf } from '../domain/provisioning';
import { ServerlessProvisioner } from '../domain/serverless/provisioner';
import { planSettingsOf, type Primitive } from '../domain/serverless/plans';
import { ServerlessDataPlane, type ServerlessDataPlaneOptions } from '../dataplane/serverless/server';
import type { Stack } from './helpers/stack';

/**
 * A data plane on the stack's database, keyring, Temporal and plan settings, insecure targets
 * allowed (the tests' receivers are on loopback), with the backends and options given.
 */
export function testPlane(stack: Stack, options: Partial<ServerlessDataPlaneOptions> = {}): ServerlessDataPlane {
  return new ServerlessDataPlane({
    db: stack.db,
    keyring: stack.api.deps.keyring,
    temporal: stack.api.deps.temporal,
    plans: planSettingsOf(stack.config),
    allowInsecureTargets: true,
    ...options,
  });
}

/** What the serverless tests share: a tenant of a primitive for an account, provisioned as an order would, and its first token. */
export interface TestTenant {
  accountId: number;
  serviceId: number;
  /** A /v1 key of the account's owner with every serverless scope. */
  key: string;
  /** A data-plane token of the tenant. */
  token: string;
  handle: string;
  endpoint: string;
}

export async function newTenant(
  stack: Stack,
  base: string,
  primitive: Primitive,
  opts: { plan?: string; accountId?: number; key?: string } = {},
): Promise<TestTenant> {
  let accountId = opts.accountId;
  let key = opts.key;
  if (accountId === undefined || key === undefined) {
    const [acct] = await stack
      .db('accounts')
      .insert({ name: `serverless ${primitive}` })
      .returning('id');
    accountId = Number(acct.id);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    key = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['serverless:read', 'serverless:keys', 'services:read'] })).token;
  }
  const plan = opts.plan ?? `serverless-${primitive}`;
  const svc = await createService(stack.db, accountId, { family: 'other', product: plan });
  await stack.db('services').where({ id: svc.serviceId }).update({ product_family: 'serverless' });
  await new ServerlessProvisioner(stack.db, base).provision((await provisionTargetOf(stack.db, svc.serviceId))!);
  const rotated = await stack.http.post(`/v1/serverless/${primitive}/keys/rotate`, { token: key, body: {} });
  if (rotated.status !== 200) throw new Error(`rotate: ${rotated.status} ${rotated.text}`);
  const tenant = await stack.db('serverless_tenants').where({ service_id: svc.serviceId }).first();
  return { accountId, serviceId: svc.serviceId, key, token: rotated.body.token, handle: tenant.handle, endpoint: tenant.api_endpoint };
}

/** A request to a data plane with a Bearer token; the answer with its body read. */
export async function call(
  url: string,
  opts: { method?: string; token?: string | null; body?: string | Buffer | object; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Buffer | undefined;
  if (opts.body !== undefined) {
    body = typeof opts.body === 'string' || Buffer.isBuffer(opts.body) ? opts.body : JSON.stringify(opts.body);
    if (!Buffer.isBuffer(opts.body) && typeof opts.body === 'object') headers['content-type'] = 'application/json';
  }
  const res = await fetch(url, { method: opts.method ?? 'GET', headers, body });
  const raw = Buffer.from(await res.arrayBuffer());
  let json: any = null;
  try {
    json = JSON.parse(raw.toString('utf8'));
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, raw, text: raw.toString('utf8'), body: json };
}

/** Polls until `ok` holds (or the time is up); returns the last value. */
export async function eventually<T>(read: () => Promise<T>, ok: (value: T) => boolean, ms = 5_000, every = 100): Promise<T> {
  const started = Date.now();
  let value = await read();
  while (!ok(value) && Date.now() - started < ms) {
    await new Promise((r) => setTimeout(r, every));
    value = await read();
  }
  return value;
}
