/**
 * The workflow bundle's entry: every workflow the worker runs. Deterministic code only: no Node
 * built-ins, no I/O, no Date.now()/Math.random() (lint enforces the imports under workflows/).
 */
export * from './orders/order.workflow';
export * from './webhooks/webhook-endpoint.workflow';
export * from './webhooks/webhook-delivery.workflow';
export * from './vps/vps-power.workflow';
export * from './vps/vps-reinstall.workflow';
export * from './vps/vps-backup.workflow';
export * from './vps/vps-restore.workflow';
export * from './dbaas/dbaas-backup.workflow';
export * from './services/service-teardown.workflow';
