/** The object storage family's workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './objectstorage-empty.workflow';
