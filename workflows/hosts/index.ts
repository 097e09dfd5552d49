/** Workflows of hosts and placement (re-exported by the bundle's entry, workflows/index.ts). */
export * from './host-call.workflow';
