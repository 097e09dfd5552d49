/** Servers' logs: read from their files, also while the server is down (when they matter most). */
import { openTenantFile } from './tenant-files';

/**
 * The last lines of a text file, reading backwards in chunks so a large log costs only its tail.
 * `enough` decides when the lines read so far suffice (entries may span several lines).
 */
export async function tailLines(
  file: string,
  enough: (lines: string[]) => boolean,
  maxBytes = 8 * 1024 * 1024,
): Promise<{ lines: string[]; fromStart: boolean }> {
  // A tenant file: the log is in a directory the server's account writes, and this process (root)
  // must not read another server's log or any other file on its behalf, nor block on a FIFO.
  const handle = await openTenantFile(file, 'read');
  try {
    const { size } = await handle.stat();
    let position = size;
    let tail = Buffer.alloc(0);
    let chunk = 64 * 1024;
    while (position > 0 && size - position < maxBytes) {
      const length = Math.min(chunk, position);
      position -= length;
      const buf = Buffer.alloc(length);
      await handle.read(buf, 0, length, position);
      // Decoded as a whole: a chunk boundary may split a multi-byte character.
      tail = Buffer.concat([buf, tail]);
      const lines = tail.toString('utf8').split('\n');
      // The first line may be cut in the middle; it only counts once the file's start is reached.
      if (position > 0 && enough(lines.slice(1))) return { lines: lines.slice(1).filter((l) => l !== ''), fromStart: false };
      chunk *= 2;
    }
    const text = tail.toString('utf8');
    return { lines: text.split('\n').filter((l) => l !== ''), fromStart: position === 0 };
  } finally {
    await handle.close();
  }
}
