import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { create as createTar } from 'tar';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** What the CaaS tests share: source archives served on loopback, built from small apps. */
export interface ArchiveServer {
  url(name: string): string;
  /** Serves `files` (path -> content) as `<name>.tar.gz`, under a lone top directory `app/`. */
  put(name: string, files: Record<string, string>): Promise<{ sha256: string }>;
  close(): Promise<void>;
}

export async function startArchiveServer(): Promise<ArchiveServer> {
  const archives = new Map<string, Buffer>();
  const work = await mkdtemp(path.join(tmpdir(), 'caas-src-'));
  const server = http.createServer((req, res) => {
    const body = archives.get(req.url ?? '');
    if (!body) return void res.writeHead(404).end('no such archive');
    res.writeHead(200, { 'content-type': 'application/gzip', 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (name) => `http://127.0.0.1:${port}/${name}.tar.gz`,
    async put(name, files) {
      const root = path.join(work, name);
      await rm(root, { recursive: true, force: true });
      for (const [file, content] of Object.entries(files)) {
        await mkdir(path.dirname(path.join(root, 'app', file)), { recursive: true });
        await writeFile(path.join(root, 'app', file), content);
      }
      const tarball = path.join(work, `${name}.tar.gz`);
      await createTar({ gzip: true, file: tarball, cwd: root, portable: true }, ['app']);
      const body = await (await import('node:fs/promises')).readFile(tarball);
      archives.set(`/${name}.tar.gz`, body);
      return { sha256: createHash('sha256').update(body).digest('hex') };
    },
    async close() {
      await new Promise((r) => server.close(r));
      await rm(work, { recursive: true, force: true });
    },
  };
}

/** A Node app that answers JSON with its variables (GREETING, the DATABASE_URLs' presence) and a version. */
export const sampleApp = (version: string) => ({
  'package.json': JSON.stringify({ name: 'sample', version: '1.0.0', scripts: { start: 'node server.js' } }),
  'server.js': `const http = require('node:http');
const port = Number(process.env.PORT);
http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ version: ${JSON.stringify(version)}, greeting: process.env.GREETING ?? null, host: req.headers.host, databases: Object.keys(process.env).filter((k) => k.startsWith('DATABASE_URL')).sort() }));
}).listen(port, () => console.log('listening on ' + port));
process.on('SIGTERM', () => process.exit(0));
`,
});
