/** The orders' workflow (re-exported by the bundle's entry, workflows/index.ts). */
export * from './order.workflow';
