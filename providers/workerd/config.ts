/**
 * What one workerd process of a tenant runs: a deploy directory holding the capnp config, the
 * router worker and every function's module, each embedded by file (`esModule = embed "fn-<name>.js"`),
 * so no customer text is ever interpolated into the config. A directory per deploy: the old process
 * keeps reading its own files while the new one starts.
 *
 * The router is the only worker on the socket. It dispatches on the `cf-fn-name` header (the runtime
 * always sets it) to a service binding per function and turns an exception from the binding's
 * fetch into a 500 carrying `cf-fn-status: <marker> threw`; the marker is random per process and
 * only the router's env holds it, so a function cannot make its own 500 count as an error (or hide
 * one). The runtime removes the header before the answer goes out.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { checkFunctionName } from '../functions.provider';

export const NAME_HEADER = 'cf-fn-name';
export const STATUS_HEADER = 'cf-fn-status';
/** Inside the sandbox: the deploy directory is bound read-only here. */
export const SANDBOX_CONFIG_DIR = '/app/conf';
export const CONFIG_FILE = 'config.capnp';
const COMPATIBILITY_DATE = '2025-09-01';

export interface Deployment {
  dir: string;
  /** What the router puts in `cf-fn-status` (`<marker> threw`, `<marker> missing`). */
  marker: string;
}

/** The router worker: the same source for every process; its marker and bindings come from the config. */
export const ROUTER_SOURCE = `// Written by the functions runtime (providers/workerd/config.ts).
const NAME = ${JSON.stringify(NAME_HEADER)};
const STATUS = ${JSON.stringify(STATUS_HEADER)};
const plain = (status, text, marker) => new Response(text, { status, headers: { 'content-type': 'text/plain;charset=UTF-8', [STATUS]: marker } });
export default {
  async fetch(request, env) {
    const name = request.headers.get(NAME);
    const key = 'fn:' + name;
    if (name === null || !Object.hasOwn(env, key)) return plain(404, 'no such function\\n', env.MARKER + ' missing');
    const headers = new Headers(request.headers);
    headers.delete(NAME);
    headers.delete(STATUS);
    try {
      return await env[key].fetch(new Request(request, { headers }));
    } catch {
      return plain(500, 'the function threw an exception\\n', env.MARKER + ' threw');
    }
  },
};
`;

/** Only these characters reach the capnp text (names are checked before; this guards the renderer itself). */
const CAPNP_SAFE = /^[A-Za-z0-9:._=-]+$/;
function capnpText(value: string): string {
  if (!CAPNP_SAFE.test(value)) throw new Error(`refusing to put ${JSON.stringify(value)} into a workerd config`);
  return `"${value}"`;
}

const moduleFile = (name: string) => `fn-${name}.js`;

/** The capnp config of a process serving `names`, with a `memoryMb` V8 heap cap (process-wide: it fails fast and the runtime restarts it). */
export function renderConfig(names: string[], marker: string, memoryMb: number): string {
  if (!Number.isInteger(memoryMb) || memoryMb < 16) throw new Error(`memoryMb must be an integer of at least 16, not ${memoryMb}`);
  const worker = (file: string, moduleName: string, bindings: string[]) =>
    `(modules = [(name = ${capnpText(moduleName)}, esModule = embed ${capnpText(file)})], compatibilityDate = ${capnpText(COMPATIBILITY_DATE)}` +
    (bindings.length ? `,\n      bindings = [\n        ${bindings.join(',\n        ')},\n      ]` : '') +
    ')';
  const routerBindings = [
    `(name = "MARKER", text = ${capnpText(marker)})`,
    ...names.map((n) => `(name = ${capnpText(`fn:${n}`)}, service = ${capnpText(`fn-${n}`)})`),
  ];
  const services = [
    `(name = "router", worker = ${worker('router.js', 'router.js', routerBindings)})`,
    // The module is named after the function: the loader's messages say `at hello.js:3`.
    ...names.map((n) => `(name = ${capnpText(`fn-${n}`)}, worker = ${worker(moduleFile(n), `${n}.js`, [])})`),
  ];
  return `# Written by the functions runtime (providers/workerd/config.ts); one tenant's process.
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    ${services.join(',\n    ')},
  ],
  # The address is never used: the runtime passes the listening socket (--socket-fd http=3).
  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "router")],
  v8Flags = [${capnpText(`--max-old-space-size=${memoryMb}`)}],
);
`;
}

/**
 * Writes a new deploy directory `dir` (it must not exist) for `functions`: files 0644 and the
 * directory 0755, readable by the sandbox's uid 65534. Returns the process's marker.
 */
export async function writeDeployment(dir: string, functions: ReadonlyMap<string, string>, memoryMb: number): Promise<Deployment> {
  const names = [...functions.keys()].sort();
  for (const name of names) checkFunctionName(name);
  const marker = randomBytes(16).toString('hex');
  await fs.mkdir(dir, { mode: 0o755 });
  await fs.chmod(dir, 0o755);
  const write = (file: string, text: string) => fs.writeFile(path.join(dir, file), text, { mode: 0o644, flag: 'wx' });
  await write('router.js', ROUTER_SOURCE);
  for (const name of names) await write(moduleFile(name), functions.get(name) as string);
  await write(CONFIG_FILE, renderConfig(names, marker, memoryMb));
  return { dir, marker };
}

/**
 * The loader's message for the customer, from what workerd printed before it exited: its
 * `service fn-<name>: ` prefix becomes `<name>: `, and paths of the sandbox or the host are removed.
 */
export function loaderMessage(stderr: string, hostDir: string): string | null {
  const lines = stderr.split('\n');
  const start = lines.findIndex((l) => /^service fn-[a-z0-9-]+: /.test(l));
  if (start < 0) return null;
  const message = lines
    .slice(start, start + 8)
    .filter((l) => l.trim() !== '')
    .join('\n')
    .replace(/^service fn-([a-z0-9-]+): /, '$1: ')
    .replaceAll(hostDir, '')
    .replaceAll(`${SANDBOX_CONFIG_DIR}/`, '')
    .replaceAll(SANDBOX_CONFIG_DIR, '');
  return message.slice(0, 2000);
}
