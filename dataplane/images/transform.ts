import sharp from 'sharp';
import type { OutputFormat, Transformation } from './params';

/**
 * The transformation itself, with sharp (prebuilt libvips). Input that is not an image sharp can
 * decode, or whose pixel count is over the limit (a decompression bomb), is refused with
 * UnsupportedImageError (the delivery plane's 422 `unsupported_image`); nothing here throws anything
 * else for bad input, so a bad image never takes the process down.
 */
export class UnsupportedImageError extends Error {}

/** At most this many input pixels are decoded (8192 x 8192 and a little more). */
export const MAX_INPUT_PIXELS = 70_000_000;

const MIME: Record<OutputFormat, string> = { webp: 'image/webp', avif: 'image/avif', jpeg: 'image/jpeg', png: 'image/png' };

export interface Transformed {
  body: Buffer;
  format: OutputFormat;
  contentType: string;
  width: number;
  height: number;
}

// One libvips thread per transformation: the process serves requests side by side instead.
sharp.concurrency(1);
sharp.cache(false);

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * One sharp pipeline per transformation (no separate `metadata()` call: that was a second trip
 * through libuv's pool and libvips per miss). libvips reads the header before it decodes, so
 * `limitInputPixels` refuses a decompression bomb without decoding it; `format: 'source'` is told
 * from the first bytes (PNG stays PNG, the rest become JPEG).
 */
export async function transform(input: Buffer, t: Transformation): Promise<Transformed> {
  const format: OutputFormat = t.format !== 'source' ? t.format : input.subarray(0, 8).equals(PNG_SIGNATURE) ? 'png' : 'jpeg';
  try {
    let pipeline = sharp(input, { limitInputPixels: MAX_INPUT_PIXELS, failOn: 'error' }).rotate();
    if (t.w !== null || t.h !== null) {
      pipeline = pipeline.resize({
        width: t.w ?? undefined,
        height: t.h ?? undefined,
        fit: t.fit,
        // Padding of `contain`: transparent where the format has alpha, white otherwise.
        background: format === 'jpeg' ? { r: 255, g: 255, b: 255, alpha: 1 } : { r: 0, g: 0, b: 0, alpha: 0 },
      });
    }
    if (format === 'jpeg') pipeline = pipeline.flatten({ background: '#ffffff' }).jpeg({ quality: t.q, mozjpeg: true });
    // PNG is lossless: `q` does not apply (sharp would turn a quality into a 256-colour palette).
    else if (format === 'png') pipeline = pipeline.png({ compressionLevel: 6 });
    else if (format === 'webp') pipeline = pipeline.webp({ quality: t.q });
    else pipeline = pipeline.avif({ quality: t.q, effort: 2 });
    const { data, info } = await pipeline.toBuffer({ resolveWithObject: true });
    return { body: data, format, contentType: MIME[format], width: info.width, height: info.height };
  } catch (err) {
    const reason = (err as Error).message;
    if (/pixel limit/i.test(reason)) throw new UnsupportedImageError(`the source has more than ${MAX_INPUT_PIXELS} pixels`);
    throw new UnsupportedImageError(`the source is not an image this service can read (${reason})`);
  }
}
