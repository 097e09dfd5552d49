/**
 * Checks on what the engine puts into podman's argv. Callers validate customers' input first; these
 * guard the engine itself: a value starting with `-` must never become a flag, a label must not
 * smuggle a newline, and a uid range must never map a container's root to a host account.
 */

/** Container and network names (the brief's `caas-<app>-<deployment>`, `caas-t<tenant>`). */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,127}$/;
/** Image references the engine builds and runs: local names, an optional tag. */
export const IMAGE_PATTERN = /^(localhost\/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$/;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Container uid ranges start above the host's own accounts (0..65535). */
export const MIN_UID_BASE = 65_536;
const MAX_UID_BASE = 2 ** 32 - 1 - 65_536;

export function checkName(what: string, name: string): void {
  if (!NAME_PATTERN.test(name)) throw new Error(`${what} name ${JSON.stringify(name)} does not match ${NAME_PATTERN}`);
}

export function checkImage(image: string): void {
  if (!IMAGE_PATTERN.test(image)) throw new Error(`image ${JSON.stringify(image)} is not a local image reference`);
}

export function checkLabels(labels: Record<string, string>): void {
  for (const [key, value] of Object.entries(labels)) {
    if (!LABEL_KEY.test(key)) throw new Error(`label key ${JSON.stringify(key)} does not match ${LABEL_KEY}`);
    // eslint-disable-next-line no-control-regex
    if (typeof value !== 'string' || /[\u0000-\u001f\u007f]/.test(value) || value.length > 1024) throw new Error(`label ${key} has an invalid value`);
  }
}

export function checkEnv(env: Record<string, string>): void {
  for (const [name, value] of Object.entries(env)) {
    if (!ENV_NAME.test(name)) throw new Error(`environment variable name ${JSON.stringify(name)} does not match ${ENV_NAME}`);
    if (typeof value !== 'string' || value.includes('\0')) throw new Error(`environment variable ${name} must be a string without NUL`);
  }
}

function checkPort(what: string, port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new Error(`${what} must be a port number, not ${port}`);
}

export interface ResourceSpec {
  hostPort: number;
  containerPort: number;
  memoryBytes: number;
  cpus: number;
  pidsLimit?: number;
  uidBase: number;
}

export function checkResources(spec: ResourceSpec): void {
  checkPort('hostPort', spec.hostPort);
  checkPort('containerPort', spec.containerPort);
  if (!Number.isInteger(spec.memoryBytes) || spec.memoryBytes < 16 * 1024 * 1024) throw new Error('memoryBytes must be an integer of at least 16 MiB');
  if (!(spec.cpus > 0 && spec.cpus <= 1024)) throw new Error('cpus must be above 0');
  if (spec.pidsLimit !== undefined && !(Number.isInteger(spec.pidsLimit) && spec.pidsLimit >= 8)) throw new Error('pidsLimit must be an integer of at least 8');
  if (!Number.isInteger(spec.uidBase) || spec.uidBase < MIN_UID_BASE || spec.uidBase > MAX_UID_BASE)
    throw new Error(`uidBase must be an integer from ${MIN_UID_BASE} (host accounts are below it)`);
}
