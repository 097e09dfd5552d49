import { S3Client } from '@aws-sdk/client-s3';
import { expect } from 'vitest';
import { ObjectStorageProvisioner } from '../domain/objectstorage/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { createService } from './helpers/fixtures';
import type { Stack } from './helpers/stack';

/** Object storage test helpers: an account's storage built as an order would, and S3 clients as a customer makes them. */

/** An object storage service of `accountId`, provisioned (its place on the host's server and its record). */
export async function provisionStorage(stack: Stack, accountId: number): Promise<{ serviceId: number; id: string }> {
  const service = await createService(stack.db, accountId, { family: 'objectstorage', product: 'objectstorage-250' });
  const target = (await provisionTargetOf(stack.db, service.serviceId))!;
  const provisioner = new ObjectStorageProvisioner(stack.db, stack.api.deps.providers.objectstorage, stack.api.deps.providers.hosts);
  await provisioner.provision(target);
  expect(await provisioner.isActive(target)).toBe(true);
  return service;
}

/** The AWS SDK v3 S3 client a customer would configure from the singleton and an issued key. */
export function s3Client(storage: { s3_endpoint: string; region: string }, key: { access_key_id: string; secret_access_key: string }): S3Client {
  return new S3Client({
    endpoint: storage.s3_endpoint,
    region: storage.region,
    forcePathStyle: true,
    credentials: { accessKeyId: key.access_key_id, secretAccessKey: key.secret_access_key },
    // SeaweedFS takes the SDK's default CRC checksums on uploads, but presigned URLs must not carry them.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 1,
  });
}

/** Polls `read` until `ok` or the time is up; the last value either way. */
export async function eventually<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 10_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await read();
  while (!ok(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, intervalMs));
    value = await read();
  }
  return value;
}

/** The S3 error name of a failed SDK call (`AccessDenied`), or `ok`. */
export async function s3Outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (err) {
    return (err as { name?: string }).name ?? 'error';
  }
}
