/** The container apps' workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './caas-deploy.workflow';
