/** The DBaaS family's workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './dbaas-backup.workflow';
export * from './dbaas-move.workflow';
