import type { Knex } from 'knex';
import type { WordpressProvider, WpPhpSettings } from '../../providers/wordpress.provider';
import { validationFailed, type FieldError } from '../errors';
import type { SiteRow } from './store';

/**
 * What a site runs on (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): its caches, its core
 * version, its PHP version and settings. The rules of the PHP settings customers may change live
 * here; the backend applies them with a graceful reload.
 */

/** A PHP size setting's bounds, in MiB. */
const SIZE_BOUNDS = {
  memory_limit: { min: 64, max: 1024 },
  upload_max_filesize: { min: 1, max: 512 },
  post_max_size: { min: 1, max: 512 },
} as const;

const INTEGER_BOUNDS = {
  max_execution_time: { min: 1, max: 300, unit: ' seconds' },
  max_input_vars: { min: 100, max: 100_000, unit: '' },
} as const;

export const PHP_SETTING_KEYS = ['memory_limit', 'upload_max_filesize', 'post_max_size', 'max_execution_time', 'max_input_vars'] as const;

const mib = (n: number) => (n >= 1024 && n % 1024 === 0 ? `${n / 1024}G` : `${n}M`);

/** PHP's size shorthand (`128M`, `1G`, `524288K`) in MiB; null when it is not one. */
export function sizeMib(value: string): number | null {
  const m = /^([1-9][0-9]{0,9})([KMG])$/i.exec(value);
  if (!m) return null;
  const n = Number(m[1]);
  const unit = m[2].toUpperCase();
  return unit === 'G' ? n * 1024 : unit === 'M' ? n : n / 1024;
}

/**
 * The settings a PATCH changes, checked against the site's current ones: only known keys (an
 * unknown one is its own param), sizes in PHP's shorthand within bounds, integers within bounds,
 * and `post_max_size` at least `upload_max_filesize` once the change is made. Every fault is
 * reported (400 validation_failed, `param` the first).
 */
export function phpSettingsChange(body: Record<string, unknown>, current: WpPhpSettings): Partial<WpPhpSettings> {
  const errors: FieldError[] = [];
  const change: Partial<WpPhpSettings> = {};
  for (const [key, value] of Object.entries(body)) {
    if (!(PHP_SETTING_KEYS as readonly string[]).includes(key)) {
      errors.push({ param: key, message: `is not a PHP setting that can be changed; the settings are ${PHP_SETTING_KEYS.join(', ')}` });
      continue;
    }
    if (key in SIZE_BOUNDS) {
      const bounds = SIZE_BOUNDS[key as keyof typeof SIZE_BOUNDS];
      const rule = `must be a size such as "128M" or "1G", from ${mib(bounds.min)} to ${mib(bounds.max)}`;
      const size = typeof value === 'string' ? sizeMib(value) : null;
      if (size === null || size < bounds.min || size > bounds.max) errors.push({ param: key, message: rule });
      else change[key as keyof typeof SIZE_BOUNDS] = (value as string).toUpperCase();
    } else {
      const bounds = INTEGER_BOUNDS[key as keyof typeof INTEGER_BOUNDS];
      if (typeof value !== 'number' || !Number.isInteger(value) || value < bounds.min || value > bounds.max)
        errors.push({ param: key, message: `must be an integer from ${bounds.min} to ${bounds.max}${bounds.unit}` });
      else change[key as keyof typeof INTEGER_BOUNDS] = value;
    }
  }
  if (errors.length === 0) {
    const upload = change.upload_max_filesize ?? current.upload_max_filesize;
    const post = change.post_max_size ?? current.post_max_size;
    const uploadMib = sizeMib(upload);
    const postMib = sizeMib(post);
    if (uploadMib !== null && postMib !== null && postMib < uploadMib) {
      errors.push(
        change.post_max_size !== undefined
          ? { param: 'post_max_size', message: `must be at least upload_max_filesize (${upload}): a request carries the uploaded file` }
          : { param: 'upload_max_filesize', message: `must not be above post_max_size (${post}): a request carries the uploaded file` },
      );
    }
  }
  if (errors.length > 0) throw validationFailed(errors);
  return change;
}

/** The PHP version the site runs on, one of the host's (400 `version` otherwise). */
export async function checkPhpVersion(wp: WordpressProvider, version: string): Promise<void> {
  const available = await wp.phpVersions();
  if (!available.includes(version))
    throw validationFailed([{ param: 'version', message: `PHP ${version} is not available; choose one of ${available.join(', ')}` }]);
}

/** Keeps the site's record of its PHP version in step with what runs (orders, backups and recipes read it). */
export async function recordPhpVersion(db: Knex, serviceId: number, version: string): Promise<void> {
  await db('wordpress_sites').where({ service_id: serviceId }).update({ php_version: version });
}

/** Flushes the site's caches, and the edge's cache of its media when its CDN is on; answers what was flushed. */
export async function flushCaches(wp: WordpressProvider, site: Pick<SiteRow, 'service_id' | 'cdn_enabled'>): Promise<string[]> {
  const flushed = await wp.flushCache(site.service_id);
  if (site.cdn_enabled) {
    await wp.purgeCdn(site.service_id);
    flushed.push('cdn');
  }
  return flushed;
}
