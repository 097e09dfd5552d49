/**
 * Files in directories a tenant's server writes (its log, pidfile, backups), opened by the control
 * plane, which runs as root. The server's account (and whatever code a customer gets to run
 * inside the server) can put anything there: a symbolic link to another tenant's file or to
 * /etc/passwd, a hard link, a FIFO that blocks an open() for ever, a huge file. So every such file
 * is opened here without following links and without blocking, and used only when it is a plain
 * file with one name; reads are capped.
 */
import { constants as fsConstants, promises as fs } from 'node:fs';
import { LocalServerError } from './errors';

const { O_RDONLY, O_WRONLY, O_APPEND, O_CREAT, O_NOFOLLOW, O_NONBLOCK } = fsConstants;

/** A tenant-writable path that is not a plain file of its own (a link, a FIFO, a hard link...). */
export class TenantFileError extends LocalServerError {
  constructor(file: string, what: string) {
    super(`${file} is ${what}, not a plain file: refused`, 'a server wrote something other than a plain file where it keeps its own files; remove it');
    this.name = 'TenantFileError';
  }
}

/**
 * Opens `file` for reading, or for appending (created when missing, mode 0640), refusing links, FIFOs,
 * devices and files with another name elsewhere (a hard link to a file the account does not own).
 */
export async function openTenantFile(file: string, how: 'read' | 'append'): Promise<fs.FileHandle> {
  const flags = how === 'read' ? O_RDONLY | O_NOFOLLOW | O_NONBLOCK : O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK;
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, flags, 0o640);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // ELOOP: a symbolic link (O_NOFOLLOW); ENXIO: a FIFO nobody reads (opened to write).
    if (code === 'ELOOP') throw new TenantFileError(file, 'a symbolic link');
    if (code === 'ENXIO') throw new TenantFileError(file, 'a FIFO');
    throw err;
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new TenantFileError(file, stat.isFIFO() ? 'a FIFO' : 'not a regular file');
    if (stat.nlink !== 1) throw new TenantFileError(file, 'a hard link');
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** The start of `file` (at most `maxBytes`) as UTF-8, opened as `openTenantFile` does. */
export async function readTenantFile(file: string, maxBytes = 1024 * 1024): Promise<string> {
  const handle = await openTenantFile(file, 'read');
  try {
    const buf = Buffer.alloc(Math.min(maxBytes, (await handle.stat()).size));
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}
