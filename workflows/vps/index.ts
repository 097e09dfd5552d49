/** The VPS family's workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './vps-power.workflow';
export * from './vps-reinstall.workflow';
export * from './vps-backup.workflow';
export * from './vps-restore.workflow';
