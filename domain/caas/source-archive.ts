import { constants, createReadStream } from 'node:fs';
import { chmod, mkdir, open, readdir, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { createGunzip } from 'node:zlib';
import { Parser, type ReadEntry } from 'tar';

/**
 * Unpacking a CaaS source archive (DECISIONS "CaaS": a `.tar.gz`, a lone top directory stripped)
 * into an empty directory, with nothing a customer puts in the archive able to write anywhere else.
 *
 * The downloaded file is read twice:
 * 1. survey: every entry is checked (its type, its path, the caps, clashes with earlier entries)
 *    and the lone top directory is found, before anything is written. One bad entry refuses the
 *    whole archive (ArchiveRefused): nothing is written, so a refusal never leaves half a tree.
 * 2. write: the same entries again, written by this module (not node-tar's Unpack, whose link and
 *    path-reservation logic would be ours to trust): directories with mkdir, regular files created
 *    with O_EXCL | O_NOFOLLOW, modes normalised (files 0644, or 0755 if any execute bit was set;
 *    directories 0755), owners and times not carried over (this process owns everything, mtime is
 *    the write's).
 *
 * Why nothing can land outside `dir`: only regular files and directories are accepted (symbolic and
 * hard links, devices, FIFOs and every other type refuse the archive, rather than being skipped, so
 * that a tree never silently misses a file it relies on); every path is relative, without `..`
 * (refused) or empty and `.` segments (dropped); and `dir` starts empty. So each path joined to
 * `dir` stays under it, and no component of it can be a link, since nothing here makes one.
 * O_EXCL | O_NOFOLLOW and a containment check on every target are a second line, not the proof.
 *
 * Tar bombs: at most `maxEntries` entries, and files and directories (implied parents included),
 * at most `maxUnpackedBytes` of file contents (declared sizes, refused at the header before the
 * body is read), and the decompressed tar stream at most those plus a per-entry allowance for
 * headers, long names and padding (a stream of metadata headers or of trailing zeros).
 */
export class ArchiveRefused extends Error {}

export interface ArchiveLimits {
  maxEntries: number;
  maxUnpackedBytes: number;
}

type Kind = 'file' | 'dir';

interface Plan {
  /** Whether the first segment of every path (the lone top directory) is dropped. */
  strip: boolean;
  /** Every path the archive makes (segments joined by `/`), implied parent directories included. */
  kinds: Map<string, Kind>;
  files: number;
  bytes: number;
}

const FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile']);
const TYPE_WORDS: Record<string, string> = {
  SymbolicLink: 'a symbolic link',
  Link: 'a hard link',
  CharacterDevice: 'a character device',
  BlockDevice: 'a block device',
  FIFO: 'a FIFO (named pipe)',
};
/** Room for a path below the directory an app is unpacked into, within Linux's 4096-byte PATH_MAX. */
const MAX_PATH_BYTES = 2048;
const MAX_NAME_BYTES = 255;
/** Tar stream bytes allowed per entry beyond its contents: header, pax header, long name, padding. */
const HEADER_ALLOWANCE = 8 * 1024;
/** End-of-archive blocks and the record padding after them. */
const TAIL_ALLOWANCE = 1 << 20;
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);
const DIR_MODE = 0o755;
const FILE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** A size for messages: in MiB from 1 MiB up (exact when whole), else in bytes. */
export function sizeWords(bytes: number): string {
  const mib = bytes / (1 << 20);
  if (mib < 1) return `${bytes} bytes`;
  return Number.isInteger(mib) ? `${mib} MiB` : `${mib.toFixed(1)} MiB`;
}

/** An entry's path as the customer wrote it, quoted and cut short for a message. */
function shown(raw: string): string {
  return JSON.stringify(raw.length > 200 ? `${raw.slice(0, 200)}...` : raw);
}

function kindOf(entry: ReadEntry): Kind {
  if (FILE_TYPES.has(entry.type)) return 'file';
  if (entry.type === 'Directory') return 'dir';
  const what = TYPE_WORDS[entry.type] ?? `of a type that is not unpacked (${entry.type})`;
  throw new ArchiveRefused(`entry ${shown(entry.path)} is ${what}; an archive may hold only regular files and directories`);
}

/** The path's segments below the archive's root, or ArchiveRefused for a path that could leave it. */
export function segmentsOf(raw: string): string[] {
  if (raw.includes('\0')) throw new ArchiveRefused(`entry ${shown(raw)} has a NUL character in its path`);
  if (raw.startsWith('/')) throw new ArchiveRefused(`entry ${shown(raw)} has an absolute path; paths must be relative to the archive's root`);
  // A separator on Windows, an ordinary character here: refused rather than guessed at.
  if (raw.includes('\\')) throw new ArchiveRefused(`entry ${shown(raw)} has a backslash in its path; use / between directories`);
  if (Buffer.byteLength(raw) > MAX_PATH_BYTES) throw new ArchiveRefused(`entry ${shown(raw)} has a path longer than ${MAX_PATH_BYTES} bytes`);
  const segments = raw.split('/').filter((s) => s !== '' && s !== '.');
  if (segments.includes('..')) throw new ArchiveRefused(`entry ${shown(raw)} has ".." in its path; paths must stay inside the archive`);
  if (segments.some((s) => Buffer.byteLength(s) > MAX_NAME_BYTES))
    throw new ArchiveRefused(`entry ${shown(raw)} has a name longer than ${MAX_NAME_BYTES} bytes`);
  return segments;
}

const tooMany = (limits: ArchiveLimits) => new ArchiveRefused(`the archive holds more than ${limits.maxEntries} files and directories`);

/**
 * Records a path and its parents in `kinds`, refusing a path that is both a file and a directory or
 * a file given twice (a repeated directory is harmless). Parents are walked from the deepest and the
 * walk stops at one already known (its own parents were recorded with it), so the work is bounded
 * by the entries plus the paths recorded, which the entry cap bounds.
 */
function place(kinds: Map<string, Kind>, segments: string[], kind: Kind, limits: ArchiveLimits): void {
  const key = segments.join('/');
  for (let end = key.lastIndexOf('/'); end > 0; end = key.lastIndexOf('/', end - 1)) {
    const parent = key.slice(0, end);
    const seen = kinds.get(parent);
    if (seen === 'dir') break;
    if (seen === 'file') throw new ArchiveRefused(`${shown(parent)} is both a file and a directory in the archive`);
    kinds.set(parent, 'dir');
  }
  const seen = kinds.get(key);
  if (seen && seen !== kind) throw new ArchiveRefused(`${shown(key)} is both a file and a directory in the archive`);
  if (seen === 'file') throw new ArchiveRefused(`${shown(key)} appears more than once in the archive`);
  kinds.set(key, kind);
  if (kinds.size > limits.maxEntries) throw tooMany(limits);
}

/**
 * Reads the tar inside the gzip file entry by entry: `onEntry` gets each one in turn and must
 * consume it (resume it, or read its body); the next is handed over only once the previous call's
 * promise is settled. Settles once every call has; rejects with the first failure (the entry's
 * ArchiveRefused, ArchiveRefused for bad gzip or tar data or the stream cap, or an error of this
 * machine's files as it is).
 */
function readTar(file: string, limits: ArchiveLimits, onEntry: (entry: ReadEntry) => void | Promise<void>): Promise<void> {
  const streamCap = limits.maxUnpackedBytes + limits.maxEntries * HEADER_ALLOWANCE + TAIL_ALLOWANCE;
  return new Promise<void>((resolve, reject) => {
    const source = createReadStream(file);
    const gunzip = createGunzip();
    // No decompression of its own: a gzip inside the gzip is refused below, zstd and brotli never tried.
    const parser = new Parser({ strict: true, brotli: false, zstd: false });
    let chain: Promise<void> = Promise.resolve();
    let current: ReadEntry | undefined;
    let failure: Error | undefined;
    let stopped = false;
    let unpacked = 0;
    let head = Buffer.alloc(0);

    const settle = () => chain.then(() => (failure ? reject(failure) : resolve()));
    /** No more input: the file and the decompressor are closed (after the tar's end, or a failure). */
    const stop = () => {
      stopped = true;
      source.destroy();
      gunzip.destroy();
    };
    const fail = (err: Error) => {
      if (failure) return;
      failure = err;
      stop();
      // A body being copied would wait for data that never comes: end its wait.
      if (current && !current.emittedEnd) current.destroy(err);
      void settle();
    };

    parser.on('entry', (entry: ReadEntry) => {
      current = entry;
      entry.on('error', (err) => fail(err as Error));
      chain = chain.then(() => (failure ? void entry.resume() : onEntry(entry))).then(undefined, (err: unknown) => fail(err as Error));
    });
    parser.on('ignoredEntry', (entry: ReadEntry) => fail(new ArchiveRefused(`entry ${shown(entry.path)} (${entry.type}) cannot be unpacked`)));
    parser.on('error', (err: Error) => fail(new ArchiveRefused(`the archive is not a valid tar archive (${err.message})`)));
    // Whatever follows the end-of-archive blocks is not read.
    parser.on('eof', () =>
      setImmediate(() => {
        if (stopped) return;
        stop();
        parser.end();
      }),
    );
    parser.on('drain', () => gunzip.resume());
    parser.on('end', () => void settle());

    gunzip.on('data', (chunk: Buffer) => {
      if (stopped) return;
      unpacked += chunk.length;
      if (unpacked > streamCap) return fail(new ArchiveRefused(`the archive is too large once decompressed (over ${sizeWords(streamCap)})`));
      if (head.length < GZIP_MAGIC.length) {
        head = Buffer.concat([head, chunk.subarray(0, GZIP_MAGIC.length - head.length)]);
        if (head.equals(GZIP_MAGIC)) return fail(new ArchiveRefused('the archive is compressed twice; give a tar compressed once with gzip (.tar.gz)'));
      }
      if (!parser.write(chunk)) gunzip.pause();
    });
    gunzip.on('end', () => {
      if (stopped) return;
      stopped = true;
      parser.end();
    });
    gunzip.on('error', (err: Error) => {
      if (!stopped) fail(new ArchiveRefused(`the archive is not valid gzip data (${err.message})`));
    });
    source.on('error', (err: Error) => {
      if (!stopped) fail(err);
    });
    source.pipe(gunzip);
  });
}

/** Pass 1: checks every entry and plans the tree; writes nothing. */
async function survey(file: string, limits: ArchiveLimits): Promise<Plan> {
  const kinds = new Map<string, Kind>();
  const tops = new Set<string>();
  let entries = 0;
  let files = 0;
  let bytes = 0;
  await readTar(file, limits, (entry) => {
    entries += 1;
    if (entries > limits.maxEntries) throw tooMany(limits);
    const kind = kindOf(entry);
    const segments = segmentsOf(entry.path);
    if (kind === 'file') {
      if (segments.length === 0) throw new ArchiveRefused(`entry ${shown(entry.path)} is a file without a name`);
      files += 1;
      bytes += entry.size;
      if (bytes > limits.maxUnpackedBytes) throw new ArchiveRefused(`the archive unpacks to more than ${sizeWords(limits.maxUnpackedBytes)}`);
    }
    if (segments.length > 0) {
      if (tops.size < 2) tops.add(segments[0]);
      place(kinds, segments, kind, limits);
    }
    entry.resume();
  });
  if (files === 0) throw new ArchiveRefused('the archive holds no files');
  const [top] = tops;
  return { strip: tops.size === 1 && kinds.get(top) === 'dir', kinds, files, bytes };
}

/** Copies an entry's body into an open file; the number of bytes written. */
function copyBody(entry: ReadEntry, fh: FileHandle): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let written = 0;
    let pending: Promise<void> = Promise.resolve();
    entry.on('data', (chunk: Buffer) => {
      entry.pause();
      pending = pending.then(async () => {
        await fh.write(chunk);
        written += chunk.length;
        entry.resume();
      });
      pending.catch(reject);
    });
    entry.on('end', () => pending.then(() => resolve(written), reject));
    entry.on('error', reject);
  });
}

/** The place below `dir` of an archive path, or null for the root itself. */
function targetOf(dir: string, segments: string[], plan: Plan): string | null {
  const placed = plan.strip ? segments.slice(1) : segments;
  if (placed.length === 0) return null;
  const target = path.join(dir, ...placed);
  const relative = path.relative(dir, target);
  if (relative.startsWith('..') || path.isAbsolute(relative)) throw new Error('an archive path left the directory it is unpacked into');
  return target;
}

/** Pass 2: writes the planned tree; the number of regular files written. */
async function writeOut(file: string, dir: string, plan: Plan, limits: ArchiveLimits): Promise<number> {
  let files = 0;
  let bytes = 0;
  await readTar(file, limits, async (entry) => {
    const kind = kindOf(entry);
    const segments = segmentsOf(entry.path);
    if (segments.length > 0 && plan.kinds.get(segments.join('/')) !== kind) throw new Error('the archive read differently the second time');
    const target = targetOf(dir, segments, plan);
    if (!target) return void entry.resume();
    if (kind === 'dir') {
      await mkdir(target, { recursive: true, mode: DIR_MODE });
      return void entry.resume();
    }
    await mkdir(path.dirname(target), { recursive: true, mode: DIR_MODE });
    const mode = (entry.mode ?? 0) & 0o111 ? 0o755 : 0o644;
    const fh = await open(target, FILE_FLAGS, mode);
    try {
      await fh.chmod(mode); // the exact mode, whatever the umask
      bytes += await copyBody(entry, fh);
    } finally {
      await fh.close();
    }
    if (bytes > plan.bytes) throw new Error('the archive read differently the second time');
    files += 1;
  });
  for (const [key, kind] of plan.kinds) {
    const target = kind === 'dir' ? targetOf(dir, key.split('/'), plan) : null;
    if (target) await chmod(target, DIR_MODE);
  }
  return files;
}

/** Removes everything below `dir` (which was empty before the write began). */
async function emptyDir(dir: string): Promise<void> {
  for (const name of await readdir(dir)) await rm(path.join(dir, name), { recursive: true, force: true });
}

/** Whether the file starts as gzip data does. */
async function isGzip(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const { bytesRead, buffer } = await fh.read(Buffer.alloc(GZIP_MAGIC.length), 0, GZIP_MAGIC.length, 0);
    return bytesRead === GZIP_MAGIC.length && buffer.equals(GZIP_MAGIC);
  } finally {
    await fh.close();
  }
}

/**
 * Unpacks the gzip'd tar `file` into `dir`, which must exist and be empty. ArchiveRefused (nothing
 * written) for anything the rules above refuse; any other error is this machine's, and leaves `dir`
 * empty again.
 */
export async function extractArchive(file: string, dir: string, limits: ArchiveLimits): Promise<{ files: number; bytes: number }> {
  if (!(await isGzip(file))) throw new ArchiveRefused('the source is not a gzip file; give a gzip-compressed tar archive (.tar.gz)');
  const plan = await survey(file, limits);
  try {
    return { files: await writeOut(file, dir, plan, limits), bytes: plan.bytes };
  } catch (err) {
    await emptyDir(dir);
    throw err;
  }
}
