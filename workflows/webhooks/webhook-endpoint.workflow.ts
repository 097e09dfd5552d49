import {
  ActivityFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  defineQuery,
  defineSignal,
  proxyActivities,
  setHandler,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import type { BatchAttemptResult, WebhookActivities } from '../../activities/webhooks/activities';

/**
 * Every delivery of one webhook endpoint (workflow id `webhook-whk_<n>`, docs/webhooks.md "How it
 * works inside"). The dispatcher signals-with-start it with the deliveries of each batch of events;
 * it sends them in batches, each batch one activity that makes its attempts in parallel (never more
 * than `concurrency` at a time to the endpoint, across its batches, whichever worker runs them),
 * and keeps a workflow timer per group of deliveries waiting for the same retry
 * (WEBHOOK_RETRY_DELAYS), so the schedule is in the history, survives restarts and is
 * time-skippable. One workflow per endpoint instead of one per delivery: the server's work is one
 * signal, one activity and a few workflow tasks per batch, not a workflow per delivery. A regular
 * activity, not a local one: a local activity holds its workflow task open while it runs, so a
 * slow endpoint would delay the workflow's new deliveries and hold a workflow task slot of the
 * worker; an activity lets the workflow take new deliveries at once and runs on any worker.
 *
 * A breaker keeps an endpoint that keeps failing from holding sockets and worker time: after
 * `breaker.threshold` failed attempts in a row the circuit opens; attempts that come due while it
 * is open are recorded as failed without being sent (and retried on the schedule); after
 * `breaker.cooldownMs` one attempt is sent as a probe, and a 2xx closes the circuit.
 *
 * It ends when it holds nothing (the next signal-with-start begins a new run), and continues as new
 * when its history grows long, carrying what it holds.
 */
export interface PendingDelivery {
  id: string;
  /** 1-based attempt number within the current run of the schedule. */
  attempt: number;
}

export interface EndpointState {
  ready: PendingDelivery[];
  waiting: Array<{ dueAt: number; deliveries: PendingDelivery[] }>;
  breaker: { failures: number; openUntil: number | null };
  totals: WebhookEndpointSummary;
}

export interface WebhookEndpointInput {
  webhookId: number;
  /** Delay after failed attempt n before attempt n+1 (WEBHOOK_RETRY_DELAYS); attempts = delays + 1. */
  retryDelaysMs: number[];
  /** WEBHOOK_TIMEOUT: the whole response of an attempt must arrive within it. */
  timeoutMs: number;
  /** Deliveries per local activity. */
  batchSize: number;
  /** Attempts in flight at once to this endpoint (WEBHOOK_ENDPOINT_CONCURRENCY). */
  concurrency: number;
  breaker: { threshold: number; cooldownMs: number };
  /** Past this many history events the run continues as new (default 5,000, well below the server's limits). */
  historyLimit?: number;
  /** What a previous run handed over (continue-as-new). */
  carried?: EndpointState;
}

export interface WebhookEndpointSummary {
  /** Attempts made (sent or not) and how deliveries ended, in this run and the runs it continues. */
  attempts: number;
  delivered: number;
  failed: number;
  dropped: number;
}

export interface DeliveriesSignal {
  /** `attempt` defaults to 1 (a new delivery, or a redelivery's fresh schedule). */
  deliveries: Array<{ id: string; attempt?: number }>;
}

export const webhookDeliveriesSignal = defineSignal<[DeliveriesSignal]>('webhookDeliveries');

export interface EndpointView {
  ready: string[];
  inFlight: string[];
  waiting: Array<{ due_at: string; deliveries: string[] }>;
  breaker: { failures: number; open_until: string | null };
  totals: WebhookEndpointSummary;
}

export const webhookEndpointStateQuery = defineQuery<EndpointView>('webhookEndpointState');

const HISTORY_LIMIT = 5_000;
/** Batches recorded without a request (circuit open) in flight at once. */
const BATCHES_IN_FLIGHT = 4;

/**
 * Workflow time: deterministic in the sandbox (the SDK replays it from the workflow task's time).
 * The breaker's reopening time and the timers carried over continue-as-new need a clock reading.
 */
// eslint-disable-next-line no-restricted-properties
const now = () => Date.now();

export async function webhookEndpointWorkflow(input: WebhookEndpointInput): Promise<WebhookEndpointSummary> {
  const state: EndpointState = input.carried ?? {
    ready: [],
    waiting: [],
    breaker: { failures: 0, openUntil: null },
    totals: { attempts: 0, delivered: 0, failed: 0, dropped: 0 },
  };
  const held = new Set<string>([...state.ready.map((d) => d.id), ...state.waiting.flatMap((w) => w.deliveries.map((d) => d.id))]);
  const inFlight = new Map<string, PendingDelivery>();
  /** Deliveries signalled again while in flight (a redelivery racing its own last attempt). */
  const again = new Map<string, number>();
  let batchesRunning = 0;
  /** Connections the running batches may use; never more than `concurrency` for the endpoint. */
  let lanesInUse = 0;
  let probing = false;

  setHandler(webhookDeliveriesSignal, ({ deliveries }) => {
    for (const d of deliveries) {
      const attempt = d.attempt ?? 1;
      if (inFlight.has(d.id)) again.set(d.id, attempt);
      else if (!held.has(d.id)) {
        held.add(d.id);
        state.ready.push({ id: d.id, attempt });
      }
    }
  });
  setHandler(webhookEndpointStateQuery, () => ({
    ready: state.ready.map((d) => d.id),
    inFlight: [...inFlight.keys()],
    waiting: state.waiting.map((w) => ({ due_at: new Date(w.dueAt).toISOString(), deliveries: w.deliveries.map((d) => d.id) })),
    breaker: { failures: state.breaker.failures, open_until: state.breaker.openUntil === null ? null : new Date(state.breaker.openUntil).toISOString() },
    totals: state.totals,
  }));

  /** A workflow timer for deliveries that wait for the same retry. */
  const waitThenRetry = (deliveries: PendingDelivery[], delayMs: number) => {
    const entry = { dueAt: now() + delayMs, deliveries };
    state.waiting.push(entry);
    const due = () => {
      state.waiting.splice(state.waiting.indexOf(entry), 1);
      state.ready.push(...deliveries);
    };
    if (delayMs <= 0) due();
    else void sleep(delayMs).then(due);
  };
  // Timers of a previous run start again for what is left of them.
  for (const entry of state.waiting.splice(0)) waitThenRetry(entry.deliveries, entry.dueAt - now());

  const { markWebhookDeliveriesFailed } = proxyActivities<WebhookActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '2 seconds', maximumInterval: '1 minute' },
  });

  const settle = (pending: PendingDelivery) => {
    inFlight.delete(pending.id);
    const attempt = again.get(pending.id);
    again.delete(pending.id);
    if (attempt !== undefined && !held.has(pending.id)) {
      held.add(pending.id);
      state.ready.push({ id: pending.id, attempt });
    }
  };

  const retryLater = (deliveries: PendingDelivery[]) => {
    const byAttempt = new Map<number, PendingDelivery[]>();
    for (const d of deliveries) {
      const next = { id: d.id, attempt: d.attempt + 1 };
      const group = byAttempt.get(d.attempt);
      if (group) group.push(next);
      else byAttempt.set(d.attempt, [next]);
    }
    for (const [attempt, group] of byAttempt) waitThenRetry(group, input.retryDelaysMs[attempt - 1]);
  };

  const applyResults = (batch: PendingDelivery[], results: BatchAttemptResult[], sent: boolean) => {
    const byId = new Map(batch.map((d) => [d.id, d]));
    const toRetry: PendingDelivery[] = [];
    for (const r of results) {
      const pending = byId.get(r.id)!;
      state.totals.attempts += r.counted ? 1 : 0;
      if (r.outcome === 'retry') toRetry.push(pending);
      else {
        held.delete(r.id);
        state.totals[r.outcome === 'delivered' ? 'delivered' : r.outcome === 'failed' ? 'failed' : 'dropped']++;
      }
      // The breaker counts the attempts the endpoint answered (or failed to answer), in the order they ended.
      if (sent && r.sent) state.breaker.failures = r.outcome === 'delivered' ? 0 : state.breaker.failures + 1;
    }
    retryLater(toRetry);
    for (const d of batch) settle(d);
    if (probing) {
      probing = false;
      state.breaker.openUntil = state.breaker.failures === 0 ? null : now() + input.breaker.cooldownMs;
    } else if (state.breaker.openUntil === null && state.breaker.failures >= input.breaker.threshold) {
      state.breaker.openUntil = now() + input.breaker.cooldownMs;
    }
  };

  const runBatch = async (batch: PendingDelivery[], send: boolean, lanes: number) => {
    // Every attempt has its whole deadline; the batch runs `lanes` attempts at a time.
    const rounds = send ? Math.ceil(batch.length / lanes) : 0;
    const { attemptWebhookBatch } = proxyActivities<WebhookActivities>({
      startToCloseTimeout: rounds * (input.timeoutMs + 2_000) + 30_000,
      // It heartbeats after each attempt: a batch whose worker died is picked up again soon.
      heartbeatTimeout: input.timeoutMs + 30_000,
      retry: { maximumAttempts: 3, initialInterval: '2 seconds', backoffCoefficient: 2 },
    });
    const maxAttempts = input.retryDelaysMs.length + 1;
    try {
      const results = await attemptWebhookBatch({
        webhookId: input.webhookId,
        timeoutMs: input.timeoutMs,
        concurrency: Math.max(1, lanes),
        send,
        circuitOpenAfter: send ? null : state.breaker.failures,
        deliveries: batch.map((d) => ({ id: d.id, attempt: d.attempt, nextDelayMs: d.attempt < maxAttempts ? input.retryDelaysMs[d.attempt - 1] : null })),
      });
      applyResults(batch, results, send);
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      // The attempts could not even be recorded: each counts as failed, on the schedule.
      const error = `attempt could not run: ${err.cause?.message ?? err.message}`;
      const last = batch.filter((d) => d.attempt >= maxAttempts);
      retryLater(batch.filter((d) => d.attempt < maxAttempts));
      for (const d of last) held.delete(d.id);
      if (last.length) await markWebhookDeliveriesFailed({ webhookId: input.webhookId, deliveryIds: last.map((d) => d.id), error });
      state.totals.failed += last.length;
      for (const d of batch) settle(d);
      if (probing) {
        probing = false;
        state.breaker.openUntil = now() + input.breaker.cooldownMs;
      }
    }
  };

  const circuitOpen = () => state.breaker.openUntil !== null && now() < state.breaker.openUntil;

  const startBatch = () => {
    let send = true;
    let size = input.batchSize;
    let lanes = 0;
    if (circuitOpen())
      send = false; // recorded without a request: no connection needed
    else if (state.breaker.openUntil !== null) {
      size = 1; // half-open: one probe
      probing = true;
      lanes = 1;
    } else {
      size = Math.min(size, state.ready.length);
      lanes = Math.min(size, input.concurrency - lanesInUse);
    }
    const batch = state.ready.splice(0, size);
    for (const d of batch) inFlight.set(d.id, d);
    batchesRunning++;
    lanesInUse += lanes;
    void runBatch(batch, send, lanes).finally(() => {
      batchesRunning--;
      lanesInUse -= lanes;
    });
  };

  const idle = () => held.size === 0 && inFlight.size === 0 && batchesRunning === 0 && state.waiting.length === 0;
  const longHistory = () => workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > (input.historyLimit ?? HISTORY_LIMIT);
  // A probe goes alone; a long history drains its batches before continuing as new.
  const canStart = () =>
    state.ready.length > 0 && !probing && !longHistory() && (circuitOpen() ? batchesRunning < BATCHES_IN_FLIGHT : lanesInUse < input.concurrency);

  for (;;) {
    await condition(() => canStart() || idle() || (longHistory() && batchesRunning === 0));
    if (idle() && allHandlersFinished()) return state.totals;
    if (longHistory() && batchesRunning === 0 && allHandlersFinished()) {
      // Timers are not carried: the next run starts them again for what is left.
      return continueAsNew<typeof webhookEndpointWorkflow>({ ...input, carried: state });
    }
    if (canStart()) startBatch();
  }
}
