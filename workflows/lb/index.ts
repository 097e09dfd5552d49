/** The load-balancer family's workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './lb-move.workflow';
