import { defaultServerDataDir } from '../common/config';
import { defineBackend } from './backend';
import type { DbaasProvider } from './dbaas.provider';
import { DbInstancesAdapter } from './dbinstances/dbinstances.adapter';
import { DbaasSimulator } from './simulator/dbaas.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** Database instances of the DBaaS family (DBAAS_BACKEND: real servers on this machine, or the simulator). */
    dbaas: DbaasProvider;
  }
}

/** The DBaaS family's backend: a PostgreSQL or MariaDB server per instance (DBAAS_BACKEND=instances) or the simulator. */
export const dbaasBackend = defineBackend<'dbaas', DbInstancesAdapter>({
  family: 'dbaas',
  key: 'dbaas',
  simulator: ({ db, tasks }) => new DbaasSimulator(db, tasks),
  real: {
    selected: (config) => config.DBAAS_BACKEND !== 'simulator',
    create: ({ config }) =>
      new DbInstancesAdapter({ rootDir: config.DBAAS_DATA_DIR ?? defaultServerDataDir('dbaas'), addressRange: config.DBAAS_ADDRESS_RANGE }),
    // The instances listen on this machine: load-balancer backends may not point at their ports.
    listeningPorts: (instances: DbInstancesAdapter) => instances.listeningPorts(),
    // Calls name the instance (`svc-12-ab34cd`, made by domain/dbaas/store.ts) or, to create it, its service.
    placed: {
      object: 'dbaas',
      serviceOf: (method, args) => {
        if (method === 'createInstance') return (args[0] as { serviceId: number }).serviceId;
        if (method === 'resumeInstances') return 'host';
        return serviceOfInstance(args[0] as string);
      },
      localServices: async (instances: DbInstancesAdapter) => (await instances.instanceNames()).map(serviceOfInstance),
      moveWorkflow: 'dbaasMoveWorkflow',
      calls: [
        ...['createInstance', 'startInstance', 'stopInstance', 'restartInstance', 'destroyInstance', 'status', 'connectionInfo'],
        ...['listDatabases', 'createDatabase', 'deleteDatabase', 'listUsers', 'createUser', 'deleteUser', 'setPassword'],
        ...['logs', 'stats', 'startBackup', 'listBackups', 'resumeInstances'],
      ],
    },
  },
});

/** The service of an instance name (`svc-12-ab34cd` -> 12). */
function serviceOfInstance(name: string): number {
  const match = /^svc-(\d+)-/.exec(name);
  if (!match) throw new Error(`not an instance name of this control plane: ${name}`);
  return Number(match[1]);
}
