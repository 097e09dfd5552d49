/**
 * The workflow bundle's entry: every workflow the worker runs. Deterministic code only: no Node
 * built-ins, no I/O, no Date.now()/Math.random() (lint enforces the imports under workflows/).
 *
 * Workflows are bundled from this file by path, apart from the Node-side family manifests
 * (families/), so each family's folder is re-exported here: one line per family, the folder its
 * manifest names in `workflows` (test/kit-families.unit.test.ts checks the two agree).
 */
export * from './orders';
export * from './webhooks';
export * from './hosts';
export * from './vps';
export * from './lb';
export * from './dbaas';
export * from './objectstorage';
export * from './serverless';
export * from './wordpress';
export * from './caas';
export * from './services/service-teardown.workflow';
