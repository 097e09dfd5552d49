import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import type { TemporalGateway } from '../../infra/temporal';
import { OperationReads } from './read';
import { OperationStarts } from './start';
import { OperationTransitions } from './transitions';

/**
 * Operations, in modules by what they do: `contract` (states, row, view), `guards` (rows checked in
 * the statement that writes an operation's row), `start`, `read` and `transitions`. This service
 * puts the three mechanisms together for the API and the worker; code that needs one of them
 * (an activity recording transitions, a store declaring a guard) imports that module, so that no
 * import loop runs through here (test/kit-boundaries.test.ts).
 */
export class OperationService {
  readonly starts: OperationStarts;
  readonly reads: OperationReads;
  readonly transitions: OperationTransitions;

  // The parts' methods, bound (a benchmark may wrap one in place).
  start: OperationStarts['start'];
  startFromRow: OperationStarts['startFromRow'];
  drain: OperationStarts['drain'];
  findVisible: OperationReads['findVisible'];
  get: OperationReads['get'];
  recordCompleted: OperationTransitions['recordCompleted'];
  recordTransition: OperationTransitions['recordTransition'];
  abandon: OperationTransitions['abandon'];
  unconfirmed: OperationTransitions['unconfirmed'];
  seenUnfinished: OperationTransitions['seenUnfinished'];
  markWorkflowSeen: OperationTransitions['markWorkflowSeen'];
  attachService: OperationTransitions['attachService'];

  constructor(db: Knex, temporal: TemporalGateway, opts: { cacheTtlMs: number; queryTimeoutMs: number; startTimeoutMs: number; logger: Logger }) {
    this.starts = new OperationStarts(db, temporal, opts);
    this.reads = new OperationReads(db, temporal, opts);
    // A row changed by a transition is read afresh: its cached workflow state is dropped.
    this.transitions = new OperationTransitions(db, (id) => this.reads.forget(id));
    this.start = this.starts.start.bind(this.starts);
    this.startFromRow = this.starts.startFromRow.bind(this.starts);
    this.drain = this.starts.drain.bind(this.starts);
    this.findVisible = this.reads.findVisible.bind(this.reads);
    this.get = this.reads.get.bind(this.reads);
    this.recordCompleted = this.transitions.recordCompleted.bind(this.transitions);
    this.recordTransition = this.transitions.recordTransition.bind(this.transitions);
    this.abandon = this.transitions.abandon.bind(this.transitions);
    this.unconfirmed = this.transitions.unconfirmed.bind(this.transitions);
    this.seenUnfinished = this.transitions.seenUnfinished.bind(this.transitions);
    this.markWorkflowSeen = this.transitions.markWorkflowSeen.bind(this.transitions);
    this.attachService = this.transitions.attachService.bind(this.transitions);
  }
}
