import { describe, expect, it } from 'vitest';
import { loadConfig } from '../common/config';
import { parseDuration, parseDurationList } from '../common/duration';
import { Keyring } from '../common/crypto';

describe('configuration', () => {
  it('has the documented production defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      PORT: 3000,
      TEMPORAL_ADDRESS: '127.0.0.1:7233',
      TEMPORAL_NAMESPACE: 'default',
      ORDER_ACTIVATION_TIMEOUT: 30 * 60_000,
      RECIPE_PROGRESS_TIMEOUT: 15 * 60_000,
      WEBHOOK_RETRY_DELAYS: [30_000, 120_000, 600_000, 3_600_000, 21_600_000],
      WEBHOOK_TIMEOUT: 10_000,
      OPERATION_CACHE_TTL: 2_000,
      SESSION_TTL: 12 * 3_600_000,
      SIM_DELAY_SCALE: 1,
      CLOUD_DEV_ENDPOINTS: false,
      WEBHOOK_ALLOW_INSECURE_TARGETS: false,
    });
  });

  it('reads durations like 30m, 10s and 1500ms', () => {
    expect(parseDuration('1500ms')).toBe(1500);
    expect(parseDuration('10s')).toBe(10_000);
    expect(parseDuration('30m')).toBe(1_800_000);
    expect(parseDuration('12h')).toBe(43_200_000);
    expect(parseDurationList('30s,2m')).toEqual([30_000, 120_000]);
    expect(() => parseDuration('soon')).toThrow(/invalid duration/);
  });

  it('names every bad variable', () => {
    expect(() => loadConfig({ PORT: 'eighty', ORDER_ACTIVATION_TIMEOUT: 'later' })).toThrow(
      /PORT[\s\S]*ORDER_ACTIVATION_TIMEOUT|ORDER_ACTIVATION_TIMEOUT[\s\S]*PORT/,
    );
  });

  it('refuses the local stand-ins and a missing master key in production', () => {
    expect(() => loadConfig({ NODE_ENV: 'production', CLOUD_DEV_ENDPOINTS: '1', CLOUD_MASTER_KEY: 'k'.repeat(64) })).toThrow(/CLOUD_DEV_ENDPOINTS: refused/);
    expect(() => loadConfig({ NODE_ENV: 'production', WEBHOOK_ALLOW_INSECURE_TARGETS: '1', CLOUD_MASTER_KEY: 'k'.repeat(64) })).toThrow(
      /WEBHOOK_ALLOW_INSECURE_TARGETS/,
    );
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/CLOUD_MASTER_KEY/);
    expect(loadConfig({ NODE_ENV: 'production', CLOUD_MASTER_KEY: 'ab'.repeat(32) }).CLOUD_DEV_ENDPOINTS).toBe(false);
  });
});

describe('keyring', () => {
  it('seals and opens secrets per purpose, and detects tampering', () => {
    const keyring = Keyring.fromString('ab'.repeat(32));
    const sealed = keyring.encrypt('webhook-secret', 'whsec_123');
    expect(sealed).not.toContain('whsec_123');
    expect(keyring.decrypt('webhook-secret', sealed)).toBe('whsec_123');
    expect(() => keyring.decrypt('other-purpose', sealed)).toThrow();
    const parts = sealed.split('.');
    parts[3] = Buffer.from('tampered').toString('base64url');
    expect(() => keyring.decrypt('webhook-secret', parts.join('.'))).toThrow();
  });
});
