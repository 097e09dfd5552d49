/** The hosted sites' workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './wordpress-backup.workflow';
export * from './wordpress-restore.workflow';
export * from './wordpress-recipe-apply.workflow';
