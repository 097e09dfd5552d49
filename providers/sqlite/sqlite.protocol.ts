import type { BindParams, RawOutcome, ResultCaps } from './sqlite.connection';

/** What the engine (providers/sqlite/sqlite.engine.ts) and a worker process (sqlite.worker.ts) say to each other over IPC. */

/** Given to a worker as its one argument (JSON). */
export interface WorkerSettings {
  /** The folder of every tenant's folder. */
  root: string;
  /** Open databases the worker keeps (least recently used closed first). */
  maxOpen: number;
  caps: ResultCaps;
}

export type WorkerRequest =
  | { op: 'create'; tenant: string; ns: string }
  | { op: 'drop'; tenant: string; ns: string }
  | { op: 'query'; tenant: string; ns: string; sql: string; params?: BindParams; readOnly: boolean }
  | { op: 'dropTenant'; tenant: string }
  /** Closes every database; the worker exits once it has answered. */
  | { op: 'close' };

/** Answers by op: create / drop → boolean, query → RawOutcome, dropTenant / close → null. */
export type WorkerValue = boolean | RawOutcome | null;

/** A failure the engine turns back into the provider's error class. */
export interface WorkerFailure {
  kind: 'sql' | 'read_only' | 'missing' | 'script_params' | 'name' | 'internal';
  message: string;
}

/** A worker's messages: `ready` once it listens, then one reply per request, in order. */
export type WorkerMessage = { ready: true } | { id: number; ok: true; value: WorkerValue } | { id: number; ok: false; error: WorkerFailure };
