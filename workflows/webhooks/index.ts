/** The webhooks' workflows (re-exported by the bundle's entry, workflows/index.ts). */
export * from './webhook-endpoint.workflow';
export * from './webhook-delivery.workflow';
