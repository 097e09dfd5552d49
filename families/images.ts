import { imagesRoutes } from '../api/routes/images/routes';
import { seedImages } from '../db/seeds/images.seed';
import { imagesEndpointOf, ImagesProvisioner } from '../domain/images/provisioner';
import { defineFamily } from './manifest';

/**
 * Image services (SPEC "Image services"): the tenant's credentials, allowlist and usage here; the
 * images themselves from the project's own delivery plane in a process of its own
 * (dataplane/images: `npm run images`, started by `npm start`). docs/images.md.
 */
export const imagesFamily = defineFamily({
  name: 'images',
  routes: imagesRoutes,
  provisioner: ({ db, keyring, config }) => new ImagesProvisioner(db, keyring, imagesEndpointOf(config)),
  seed: ({ db, keyring, config }) => seedImages(db, keyring, config),
  config: ['IMAGES_PORT', 'IMAGES_API_ENDPOINT', 'IMAGES_CACHE_DIR', 'IMAGES_MAX_SOURCE_BYTES', 'IMAGES_FETCH_TIMEOUT'],
});
