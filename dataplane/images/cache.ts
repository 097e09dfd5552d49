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
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const temp = `${file}.${randomBytes(6).toString('hex')}.partial`;
    await fs.writeFile(temp, Buffer.concat([Buffer.from(`${image.contentType} ${image.format}\n`), image.body]), { mode: 0o600 });
    await fs.rename(temp, file);
  }

  /** Forgets every entry of a tenant (its service ended). */
  async dropTenant(tenant: string): Promise<void> {
    await fs.rm(path.join(this.dir, createHash('sha256').update(tenant).digest('hex').slice(0, 16)), { recursive: true, force: true });
  }
}
