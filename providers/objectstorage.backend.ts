import { defineBackend } from './backend';
import type { ObjectStorageProvider } from './objectstorage.provider';
import { SeaweedObjectStorageProvider } from './seaweedfs/seaweedfs.adapter';
import { ObjectStorageSimulator } from './simulator/objectstorage.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** Object storage: the host's SeaweedFS (OBJECTSTORAGE_BACKEND=seaweedfs) or the simulator. */
    objectstorage: ObjectStorageProvider;
  }
}

/** The object storage family's backend: one SeaweedFS per host, shared by the accounts placed there, or the simulator. */
export const objectStorageBackend = defineBackend<'objectstorage', SeaweedObjectStorageProvider>({
  family: 'objectstorage',
  key: 'objectstorage',
  simulator: ({ db, config }) => new ObjectStorageSimulator(db, { delayScale: config.SIM_DELAY_SCALE, region: config.OBJECTSTORAGE_REGION }),
  real: {
    selected: (config) => config.OBJECTSTORAGE_BACKEND !== 'simulator',
    create: ({ config }) =>
      new SeaweedObjectStorageProvider({
        dataDir: config.OBJECTSTORAGE_DATA_DIR,
        bindAddress: config.OBJECTSTORAGE_BIND_ADDRESS,
        s3Port: config.OBJECTSTORAGE_S3_PORT,
        region: config.OBJECTSTORAGE_REGION,
        publicEndpoint: config.OBJECTSTORAGE_PUBLIC_ENDPOINT,
      }),
    listeningPorts: async (adapter) => adapter.listeningPorts(),
    // Every call names the service first; its buckets are on its host's server.
    placed: {
      object: 'object_storage',
      serviceOf: (_method, args) => args[0] as number,
      localServices: (adapter) => adapter.serviceIds(),
      calls: [
        'open',
        'createBucket',
        'deleteBucket',
        'setPublic',
        'listBuckets',
        'listObjects',
        'deleteObjects',
        'listKeys',
        'removeKeys',
        'createKey',
        'setKeyAccess',
        'deleteKey',
        'putObject',
        'usage',
        'close',
      ],
    },
  },
});
