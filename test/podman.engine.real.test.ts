import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../providers/local-server';
import { layoutOf } from '../providers/podman/config';
import { PodmanEngine, type RunSpec } from '../providers/podman/engine';
import { podmanCall, podmanJson } from '../providers/podman/podman';

/**
 * The CaaS engine on the real podman of this machine (docs/research/caas-podman.md), in a data
 * directory of its own: the base image made from Debian and the project's Node, apps built from a
 * package.json and from a Containerfile, failures reported as answers (a build that fails, an app
 * that exits, one that never listens), env values kept out of every command line, the hardening
 * seen from inside and from the host, and the iptables isolation between tenant networks and from
 * host services. Everything made here is removed in afterAll (containers, images, networks, chains).
 */
const root = mkdtempSync(path.join(tmpdir(), 'caas-engine-'));
const dataDir = path.join(root, 'data');
const layout = layoutOf(dataDir);
const engine = new PodmanEngine({ dataDir, subnetPool: '10.219.0.0/16' });
const TENANT_A = { network: 'caas-ta', uidBase: 400_000 };
const TENANT_B = { network: 'caas-tb', uidBase: 465_536 };
const LABELS = { 'caas.test': String(process.pid) };
/**
 * The Debian minbase tar, kept between runs (as the engine keeps it in its data directory): a run
 * that finds it skips mmdebstrap (30 s to well over a minute here, depending on the mirror and the
 * machine's load) and builds the base image from it, as after a lost image.
 */
const TAR_NAME = 'debian-minbase-bookworm.tar';
const TAR_CACHE = path.resolve(__dirname, '..', '.data', 'caas-test', TAR_NAME);
const containers = new Set<string>();
const images = new Set<string>();
let hostServer: net.Server | null = null;
let isolated = false;

/** The app every test runs: answers JSON on $PORT with its env, its own view of its limits, and a TCP probe. */
const SERVER_JS = `const http = require('node:http');
const net = require('node:net');
const fs = require('node:fs');
const port = Number(process.env.PORT);
const read = (f) => { try { return fs.readFileSync(f, 'utf8').trim(); } catch { return null; } };
const status = (key) => (new RegExp('^' + key + ':\\\\s*(.*)$', 'm').exec(read('/proc/self/status') || '') || [])[1];
const writable = (dir) => { try { fs.writeFileSync(dir + '/probe', 'x'); fs.rmSync(dir + '/probe'); return true; } catch { return false; } };
function probe(host, p) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port: p });
    const t = setTimeout(() => { s.destroy(); resolve('timeout'); }, 1500);
    s.once('connect', () => { clearTimeout(t); s.destroy(); resolve('open'); });
    s.once('error', (e) => { clearTimeout(t); resolve(e.code); });
  });
}
http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://app');
  console.log('request ' + url.pathname);
  let body;
  if (url.pathname === '/self') body = { uid: process.getuid(), capEff: status('CapEff'), noNewPrivs: status('NoNewPrivs'),
    memoryLimit: read('/sys/fs/cgroup/memory/memory.limit_in_bytes') || read('/sys/fs/cgroup/memory.max'), appWritable: writable('/app'), tmpWritable: writable('/tmp') };
  else if (url.pathname === '/connect') body = { result: await probe(url.searchParams.get('host'), Number(url.searchParams.get('port'))) };
  else body = { greeting: process.env.GREETING || null, multiline: process.env.MULTI || null, port };
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
}).listen(port, () => { console.log('listening on ' + port); console.error('ready on stderr'); });
process.on('SIGTERM', () => process.exit(0));
`;

/** Writes an app's files into a fresh source folder. */
function app(name: string, files: Record<string, string>): string {
  const dir = path.join(root, 'apps', name);
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(path.join(dir, file), text, { mode: 0o600 });
  return dir;
}

const packageJson = (scripts: Record<string, string>) => JSON.stringify({ name: 'app', version: '1.0.0', private: true, scripts });

async function build(name: string, dir: string) {
  const image = `localhost/caas-test/${name}:1`;
  images.add(image);
  return engine.build(dir, image, { ...LABELS, 'caas.app': name });
}

async function run(spec: Partial<RunSpec> & { name: string; image: string }, tenant = TENANT_A) {
  const hostPort = await freeLoopbackPort();
  containers.add(spec.name);
  const full: RunSpec = { env: {}, hostPort, containerPort: 8080, memoryBytes: 128 * 1024 * 1024, cpus: 0.5, labels: { ...LABELS }, ...tenant, ...spec };
  const { id } = await engine.run(full);
  return { id, hostPort: full.hostPort };
}

async function getJson(port: number, pathname = '/'): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${port}${pathname}`);
  expect(res.status).toBe(200);
  return res.json();
}

async function inspect(name: string): Promise<any> {
  return (await podmanJson<any[]>(layout, ['container', 'inspect', '--format', 'json', name]))[0];
}

let helloImage: string;

beforeAll(() => {
  mkdirSync(path.join(root, 'apps'), { recursive: true });
  if (existsSync(TAR_CACHE)) {
    mkdirSync(path.join(dataDir, 'base'), { recursive: true });
    copyFileSync(TAR_CACHE, path.join(dataDir, 'base', TAR_NAME));
  }
});

afterAll(async () => {
  hostServer?.close();
  for (const name of containers) await engine.remove(name, 1).catch(() => undefined);
  for (const image of images) await engine.removeImage(image).catch(() => undefined);
  for (const network of [TENANT_A.network, TENANT_B.network]) await engine.removeNetwork(network).catch(() => undefined);
  if (isolated) await engine.removeIsolation();
  // What is left of this data directory's podman (base images, build cache), then its storage's own mount.
  await podmanCall(layout, ['system', 'reset', '--force'], { timeoutMs: 120_000 }).catch(() => undefined);
  const overlay = path.join(layout.root, 'overlay');
  if (readFileSync('/proc/mounts', 'utf8').includes(` ${overlay} `)) execFileSync('umount', [overlay]);
  rmSync(root, { recursive: true, force: true });
}, 180_000);

describe('podman engine: base image', () => {
  it('makes caas-node once from Debian minbase, node 24 and npm; later calls only look', async () => {
    const tar = path.join(dataDir, 'base', TAR_NAME);
    const fromCache = existsSync(tar);
    const first = await engine.ensureBaseImage();
    expect(first).toMatchObject({ image: 'localhost/caas-node:latest', built: true });
    const tarTime = statSync(tar).mtimeMs;
    if (!fromCache) {
      mkdirSync(path.dirname(TAR_CACHE), { recursive: true });
      copyFileSync(tar, TAR_CACHE);
    }
    const warm = await engine.ensureBaseImage();
    expect(warm.built).toBe(false);
    expect(warm.ms).toBeLessThan(2_000);
    console.log(`base image: ${fromCache ? 'from the cached tar' : 'cold (mmdebstrap)'} ${first.ms} ms, present ${warm.ms} ms`);

    if (!fromCache) {
      // A rebuild (both images gone) imports the cached tar instead of bootstrapping Debian again.
      await podmanCall(layout, ['rmi', 'localhost/caas-node:latest', 'localhost/caas-debian-minbase:bookworm']);
      const rebuilt = await engine.ensureBaseImage();
      expect(rebuilt.built).toBe(true);
      console.log(`base image: again from the cached tar ${rebuilt.ms} ms`);
    }
    expect(statSync(tar).mtimeMs).toBe(tarTime);

    const probe = await podmanCall(layout, [
      'run',
      '--rm',
      '--network',
      'none',
      'localhost/caas-node:latest',
      'sh',
      '-c',
      'node --version && npm --version && id -u && pwd && echo $NODE_EXTRA_CA_CERTS',
    ]);
    expect(probe.code).toBe(0);
    const [node, npm, uid, cwd, ca] = probe.stdout.trim().split('\n');
    expect(Number(/^v(\d+)\./.exec(node)![1])).toBeGreaterThanOrEqual(20);
    expect(npm).toMatch(/^\d+\.\d+\.\d+$/);
    expect([uid, cwd, ca]).toEqual(['10001', '/app', '/etc/ssl/certs/ca-certificates.crt']);
  }, 150_000);
});

describe('podman engine: apps', () => {
  it('builds a package.json app, runs it, and it answers through 127.0.0.1:hostPort with its env', async () => {
    const dir = app('hello', { 'package.json': packageJson({ start: 'node server.js' }), 'server.js': SERVER_JS });
    const t0 = Date.now();
    const built = await build('hello', dir);
    const buildMs = Date.now() - t0;
    expect(built.ok, built.log).toBe(true);
    expect(built.log).toContain('COMMIT localhost/caas-test/hello:1');
    helloImage = built.image;
    const labels = await podmanCall(layout, ['image', 'inspect', '--format', '{{index .Labels "caas.app"}}', helloImage]);
    expect(labels.stdout.trim()).toBe('hello');

    const t1 = Date.now();
    const { hostPort } = await run({ name: 'caas-hello-d1', image: helloImage, env: { GREETING: 'hi there' } });
    const runMs = Date.now() - t1;
    const ready = await engine.waitListening('caas-hello-d1', hostPort, 20_000);
    expect(ready).toMatchObject({ state: 'listening', exitCode: null });
    const t2 = Date.now();
    expect(await getJson(hostPort)).toEqual({ greeting: 'hi there', multiline: null, port: 8080 });
    console.log(`hello app: build ${buildMs} ms, run ${runMs} ms, listening after ${ready.ms} ms more, first answer ${Date.now() - t2} ms`);
    expect(await engine.state('caas-hello-d1')).toEqual({ state: 'running', exitCode: null, restarts: 0 });
  }, 60_000);

  it('gives the last lines of both output streams, timestamped, oldest first', async () => {
    const { hostPort } = { hostPort: (await inspect('caas-hello-d1')).HostConfig.PortBindings['8080/tcp'][0].HostPort };
    await getJson(Number(hostPort), '/logged');
    const lines = await engine.logs('caas-hello-d1', 50);
    const messages = lines.map((l) => l.message);
    expect(messages).toContain('listening on 8080');
    expect(messages).toContain('ready on stderr');
    expect(messages).toContain('request /logged');
    expect(messages.indexOf('listening on 8080')).toBeLessThan(messages.indexOf('request /logged'));
    for (const l of lines) expect(l.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(await engine.logs('caas-hello-d1', 1)).toEqual([lines[lines.length - 1]]);
    expect(await engine.logs('caas-nobody', 10)).toEqual([]);
  });

  it('builds and runs an app from its own Containerfile', async () => {
    const dir = app('own', {
      Containerfile: 'FROM localhost/caas-node:latest\nCOPY server.js /app/server.js\nCMD ["node", "server.js"]\n',
      'server.js': SERVER_JS,
    });
    const built = await build('own', dir);
    expect(built.ok, built.log).toBe(true);
    const { hostPort } = await run({ name: 'caas-own-d1', image: built.image, env: { GREETING: 'from a Containerfile' } });
    expect((await engine.waitListening('caas-own-d1', hostPort, 20_000)).state).toBe('listening');
    expect((await getJson(hostPort)).greeting).toBe('from a Containerfile');
  }, 60_000);

  it('reports a failing build as ok=false with the log, and refuses images that are not the platform’s', async () => {
    const failing = await build(
      'failing',
      app('failing', { 'package.json': packageJson({ build: 'node -e "console.error(\'boom-in-build\'); process.exit(2)"', start: 'node x.js' }) }),
    );
    expect(failing.ok).toBe(false);
    expect(failing.log).toContain('boom-in-build');

    const registry = await build('registry', app('registry', { Containerfile: 'FROM docker.io/library/alpine:3\nRUN true\n' }));
    expect(registry).toMatchObject({ ok: false });
    expect(registry.log).toMatch(/FROM docker.io\/library\/alpine:3: only the platform's local images/);

    // Another tenant's image is a local image too, but not one to build on or copy from.
    const other = await build('other', app('other', { Containerfile: `FROM localhost/caas-node\nCOPY --from=${helloImage} /app /stolen\n` }));
    expect(other.ok).toBe(false);
    expect(other.log).toContain('COPY --from');

    const empty = await build('empty', app('empty', { 'README.md': 'nothing to build' }));
    expect(empty).toMatchObject({ ok: false, log: 'Neither a Containerfile nor a package.json at the root of the source.\n' });
  }, 60_000);

  it('says exited (with the exit code) for an app that exits at once, timeout for one that never listens', async () => {
    const quitter = await build(
      'quitter',
      app('quitter', { 'package.json': packageJson({ start: 'node quit.js' }), 'quit.js': 'console.error("bye"); process.exit(3);\n' }),
    );
    expect(quitter.ok, quitter.log).toBe(true);
    const q = await run({ name: 'caas-quitter-d1', image: quitter.image });
    expect(await engine.waitListening('caas-quitter-d1', q.hostPort, 20_000)).toMatchObject({ state: 'exited', exitCode: 3 });
    expect(await engine.state('caas-quitter-d1')).toMatchObject({ state: 'exited', exitCode: 3 });

    const mute = await build('mute', app('mute', { 'package.json': packageJson({ start: 'node mute.js' }), 'mute.js': 'setInterval(() => {}, 1000);\n' }));
    const m = await run({ name: 'caas-mute-d1', image: mute.image });
    const waited = await engine.waitListening('caas-mute-d1', m.hostPort, 2_000);
    expect(waited).toMatchObject({ state: 'timeout', exitCode: null });
    expect(waited.ms).toBeGreaterThanOrEqual(2_000);
    await engine.remove('caas-mute-d1', 1);
    expect(await engine.state('caas-mute-d1')).toEqual({ state: 'missing', exitCode: null, restarts: 0 });
    await engine.remove('caas-mute-d1');
  }, 60_000);

  it('replaces a container of the same name', async () => {
    const first = await run({ name: 'caas-hello-blue', image: helloImage, env: { GREETING: 'one' } });
    expect((await engine.waitListening('caas-hello-blue', first.hostPort, 20_000)).state).toBe('listening');
    const second = await run({ name: 'caas-hello-blue', image: helloImage, env: { GREETING: 'two' } });
    expect(second.id).not.toBe(first.id);
    expect((await engine.waitListening('caas-hello-blue', second.hostPort, 20_000)).state).toBe('listening');
    expect((await getJson(second.hostPort)).greeting).toBe('two');
    const listed = await engine.containers(LABELS);
    expect(listed.filter((c) => c.name === 'caas-hello-blue')).toEqual([
      { name: 'caas-hello-blue', state: 'running', labels: expect.objectContaining(LABELS) },
    ]);
  }, 60_000);

  it('keeps env values out of every command line, label and file; the app gets them (also with line breaks)', async () => {
    const secret = `s3cr3t-${process.pid}-value`;
    const multi = `line one ${secret}\nline two`;
    const { id, hostPort } = await run({ name: 'caas-secret-d1', image: helloImage, env: { GREETING: secret, MULTI: multi } });
    expect((await engine.waitListening('caas-secret-d1', hostPort, 20_000)).state).toBe('listening');
    expect(await getJson(hostPort)).toMatchObject({ greeting: secret, multiline: multi });

    const cmdlines = readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .map((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
        } catch {
          return '';
        }
      });
    expect(cmdlines.some((c) => c.includes('conmon') && c.includes(id))).toBe(true);
    expect(cmdlines.filter((c) => c.includes(secret))).toEqual([]);
    expect(execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })).not.toContain(secret);
    const container = await inspect('caas-secret-d1');
    expect(JSON.stringify([container.Config.Labels, container.Config.Cmd, container.Args, container.Path])).not.toContain(secret);
    expect(readdirSync(layout.tmpDir).filter((f) => f.startsWith('env-'))).toEqual([]);
  }, 60_000);

  it('runs hardened: no capabilities, no new privileges, read-only app, memory limit, the tenant’s host uid', async () => {
    const { hostPort } = await run({ name: 'caas-hard-d1', image: helloImage, memoryBytes: 96 * 1024 * 1024 });
    expect((await engine.waitListening('caas-hard-d1', hostPort, 20_000)).state).toBe('listening');
    expect(await getJson(hostPort, '/self')).toEqual({
      uid: 10001,
      capEff: '0000000000000000',
      noNewPrivs: '1',
      memoryLimit: String(96 * 1024 * 1024),
      appWritable: false,
      tmpWritable: true,
    });
    const pid = (await inspect('caas-hard-d1')).State.Pid as number;
    const hostUids = [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)].map(
      (p) => /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))![1],
    );
    expect(new Set(hostUids)).toEqual(new Set([String(TENANT_A.uidBase + 10001)]));
  }, 60_000);
});

describe('podman engine: isolation', () => {
  it('keeps tenant networks apart and host services out of reach; the host still reaches published ports', async () => {
    const a1 = await run({ name: 'caas-iso-a1', image: helloImage });
    const a2 = await run({ name: 'caas-iso-a2', image: helloImage });
    const b1 = await run({ name: 'caas-iso-b1', image: helloImage }, TENANT_B);
    for (const [name, c] of [
      ['caas-iso-a1', a1],
      ['caas-iso-a2', a2],
      ['caas-iso-b1', b1],
    ] as const)
      expect((await engine.waitListening(name, c.hostPort, 20_000)).state).toBe('listening');
    const addressOf = async (name: string, network: string) => (await inspect(name)).NetworkSettings.Networks[network];
    const a2Ip = (await addressOf('caas-iso-a2', TENANT_A.network)).IPAddress as string;
    const b1Ip = (await addressOf('caas-iso-b1', TENANT_B.network)).IPAddress as string;
    const gatewayA = (await addressOf('caas-iso-a1', TENANT_A.network)).Gateway as string;
    // Bridges named after their subnets (10.219.0.0/24 -> podman0adb00), not podman1, podman2... as netavark would.
    const bridges = [];
    for (const network of [TENANT_A.network, TENANT_B.network])
      bridges.push((await podmanJson<any[]>(layout, ['network', 'inspect', network]))[0].network_interface);
    expect(bridges).toEqual(['podman0adb00', 'podman0adb01']);
    expect(execFileSync('ip', ['-br', 'link'], { encoding: 'utf8' })).toContain('podman0adb01');
    expect(a2Ip).toMatch(/^10\.219\./);
    expect(b1Ip).toMatch(/^10\.219\./);

    hostServer = net.createServer((socket) => {
      socket.on('error', () => undefined); // the probe closes at once: a reset is expected
      socket.end('host service\n');
    });
    await new Promise<void>((resolve) => hostServer!.listen(0, '0.0.0.0', resolve));
    const hostPort = (hostServer.address() as net.AddressInfo).port;
    const probe = async (host: string, port: number) => (await getJson(a1.hostPort, `/connect?host=${host}&port=${port}`)).result as string;

    // Without the rules, netavark lets all of it through (research §4): the probes do see it.
    if (!execFileSync('iptables', ['-w', '-S'], { encoding: 'utf8' }).includes('CAAS-FWD')) {
      expect(await probe(b1Ip, 8080)).toBe('open');
      expect(await probe(gatewayA, hostPort)).toBe('open');
    }

    isolated = true;
    await engine.ensureIsolation(['198.51.100.0/24']);
    await engine.ensureIsolation(['198.51.100.0/24']);
    const rules = execFileSync('iptables', ['-w', '-S'], { encoding: 'utf8' });
    expect(rules.split('\n').filter((l) => l === '-A FORWARD -j CAAS-FWD')).toHaveLength(1);
    expect(rules.split('\n').filter((l) => l.startsWith('-A CAAS-FWD') && /169\.254\.0\.0\/16|198\.51\.100\.0\/24/.test(l))).toHaveLength(2);

    expect(await probe(b1Ip, 8080)).not.toBe('open');
    expect(await probe(gatewayA, hostPort)).not.toBe('open');
    expect(await probe(a2Ip, 8080)).toBe('open');
    expect((await getJson(b1.hostPort)).port).toBe(8080);
  }, 90_000);
});
