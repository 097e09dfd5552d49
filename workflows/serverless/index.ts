/** The serverless family's workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './cron-run.workflow';
