import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { minbaseTar, SHARED_CACHE_DIR } from '../providers/podman/base-image';
import { layoutOf } from '../providers/podman/config';

/**
 * Makes this machine's Debian minbase tar for container apps' base image once, at install
 * (scripts/install/caas.sh): every CAAS_DATA_DIR of the machine (a checkout's `npm start`, a test)
 * then builds its base image from it in seconds instead of running mmdebstrap.
 */
async function main() {
  const started = Date.now();
  const scratch = mkdtempSync(path.join(tmpdir(), 'caas-base-'));
  try {
    await minbaseTar(layoutOf(scratch));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  console.log(`container apps: the Debian base is in ${SHARED_CACHE_DIR} (${Math.round((Date.now() - started) / 1000)} s)`);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
