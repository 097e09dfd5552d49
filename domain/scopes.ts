/** Every scope of this instance (SPEC "Authentication" 5), plus the session-only user scopes. */
export const ALL_SCOPES = [
  'services:read',
  'operations:read',
  'account:read',
  'account:write',
  'apikeys:read',
  'apikeys:write',
  'users:read',
  'users:write',
  'vps:read',
  'vps:write',
  'vps:power',
  'vps:console',
  'caas:read',
  'caas:write',
  'caas:deploy',
  'dbaas:read',
  'dbaas:write',
  'dbaas:credentials',
  'dns:read',
  'dns:write',
  'lb:read',
  'lb:write',
  'objectstorage:read',
  'objectstorage:write',
  'objectstorage:keys',
  'mailgateway:read',
  'mailgateway:write',
  'mailgateway:send',
  'images:read',
  'images:write',
  'images:keys',
  'serverless:read',
  'serverless:keys',
  'orders:read',
  'orders:write',
  'wordpress:read',
  'wordpress:write',
  'wordpress:console',
] as const;

export type Scope = (typeof ALL_SCOPES)[number];

/** No API key can hold these, not even under `*` (DECISIONS "Credentials and sessions"). */
export const SESSION_ONLY_SCOPES: readonly string[] = ['apikeys:read', 'apikeys:write', 'users:read', 'users:write'];

export const GRANTABLE_TO_KEYS: readonly string[] = ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s));

export function isKnownScope(scope: string): scope is Scope {
  return (ALL_SCOPES as readonly string[]).includes(scope);
}
