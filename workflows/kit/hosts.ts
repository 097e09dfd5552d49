import { proxyActivities, upsertMemo, type ActivityInterfaceFor, type ActivityOptions } from '@temporalio/workflow';
import type { HostActivities } from '../../activities/hosts/activities';
import { hostQueue } from '../../common/hosts';
import { familyActivities } from './proxies';

/**
 * Routing a workflow's activities to the host a resource lives on (docs/hosts.md): the worker-specific
 * task queue pattern. The workflow reads the placement (`hostOfService`, `placeService`), then sends
 * the activities that touch the resource's server to `host-<name>`, where only that host's agent
 * polls. While the host is down such an activity simply waits on its queue (no schedule-to-start
 * timeout) and runs when the host is back; `whenHostAnswers` says so to the operation's poller.
 */
export const placement = proxyActivities<HostActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/** Activities with `options`, on the host's task queue (or the workflow's own when `host` is null: a family on no host). */
export function onHost<A extends object>(host: string | null, options: ActivityOptions): ActivityInterfaceFor<A> {
  return proxyActivities<A>(host ? { ...options, taskQueue: hostQueue(host) } : options);
}

/** What an operation says while it waits for its resource's host: `result.waiting` (cleared when it resumes). */
export interface HostWait {
  reason: 'host_down';
  host: string;
  message: string;
}

/**
 * Runs `call` (activities on the host's queue) and, when the host is down as it starts, tells the
 * poller why nothing moves (`tell(wait)`, then `tell(null)` once the call went through) and the
 * Temporal UI too (the run's memo `waiting_for_host`).
 */
export async function whenHostAnswers<T>(host: string | null, tell: (wait: HostWait | null) => Promise<void>, call: () => Promise<T>): Promise<T> {
  if (!host) return call();
  const availability = await placement.hostAvailability(host);
  if (availability.status !== 'down' && availability.status !== 'unknown') return call();
  await tell({ reason: 'host_down', host, message: availability.message });
  upsertMemo({ waiting_for_host: host });
  const out = await call();
  upsertMemo({ waiting_for_host: null });
  await tell(null);
  return out;
}

/** A family's three kinds of activity call (workflows/kit/proxies.ts), on the host's queue (the workflow's own when `host` is null). */
export function familyActivitiesOnHost<A extends object>(host: string | null): ReturnType<typeof familyActivities<A>> {
  return familyActivities<A>(host ? { taskQueue: hostQueue(host) } : {});
}
