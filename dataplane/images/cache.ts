import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { OutputFormat } from './params';

/**
 * The delivery plane's cache of transformed images, on disk: one file per tenant and canonical
 * transformation (`<dir>/<tenant hash>/<xx>/<key>`), its first line the content type. Written to a
 * temporary name and renamed, so a reader sees a whole entry or none. Whether the origin is still
 * allowed is checked before the cache is asked (an origin removed from the allowlist is not served,
 * cached or not).
 */
export interface CachedImage {
  body: Buffer;
  contentType: string;
  format: OutputFormat;
}

export class DiskImageCache {
  /** Directories known to exist (made or found once): a miss does not ask for them again. */
  private readonly made = new Set<string>();

  constructor(private readonly dir: string) {}

  private fileOf(tenant: string, canonical: string): string {
    const t = createHash('sha256').update(tenant).digest('hex').slice(0, 16);
    const key = createHash('sha256').update(`${tenant}\n${canonical}`).digest('hex');
    return path.join(this.dir, t, key.slice(0, 2), key);
  }

  async get(tenant: string, canonical: string): Promise<CachedImage | null> {
    let raw: Buffer;
    try {
      raw = await fs.readFile(this.fileOf(tenant, canonical));
    } catch {
      return null;
    }
    const newline = raw.indexOf(0x0a);
    if (newline < 0) return null;
    const [contentType, format] = raw.subarray(0, newline).toString('utf8').split(' ');
    return { contentType, format: format as OutputFormat, body: raw.subarray(newline + 1) };
  }

  async put(tenant: string, canonical: string, image: CachedImage): Promise<void> {
    const file = this.fileOf(tenant, canonical);
    const dir = path.dirname(file);
    const temp = `${file}.${randomBytes(6).toString('hex')}.partial`;
    const header = Buffer.from(`${image.contentType} ${image.format}\n`);
    let handle: fs.FileHandle;
    try {
      if (!this.made.has(dir)) await this.makeDir(dir);
      handle = await fs.open(temp, 'w', 0o600);
    } catch (err) {
      // The directory went away (the cache was cleared under the process): make it again, once.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await this.makeDir(dir);
      handle = await fs.open(temp, 'w', 0o600);
    }
    try {
      const { bytesWritten } = await handle.writev([header, image.body]);
      if (bytesWritten !== header.length + image.body.length) throw new Error(`short write to the image cache (${bytesWritten} bytes)`);
      await handle.close();
      await fs.rename(temp, file);
    } catch (err) {
      await handle.close().catch(() => undefined);
      await fs.rm(temp, { force: true });
      throw err;
    }
  }

  private async makeDir(dir: string): Promise<void> {
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    if (this.made.size > 100_000) this.made.clear();
    this.made.add(dir);
  }

  /** Forgets every entry of a tenant (its service ended). */
  async dropTenant(tenant: string): Promise<void> {
    this.made.clear();
    await fs.rm(path.join(this.dir, createHash('sha256').update(tenant).digest('hex').slice(0, 16)), { recursive: true, force: true });
  }
}
