import type { FieldError } from '../errors';
import { validationFailed } from '../errors';
import type { LbListener } from '../../providers/lb.provider';
import { listenerErrors, normalizeListeners, type ListenerRuleOptions } from '../../providers/lb.rules';

/** The listener rules live with the balancer's provider (providers/lb.rules.ts); this adds the API's answer and the plans. */
export * from '../../providers/lb.rules';

/** Throws `400 validation_failed` (every problem in `errors`, the first one as `param`) unless the set is valid. */
export function requireValidListeners(listeners: readonly LbListener[], options: ListenerRuleOptions = {}): LbListener[] {
  const errors = listenerErrors(listeners, options);
  if (errors.length > 0) throw validationFailed(errors);
  return normalizeListeners(listeners);
}

/**
 * What each load-balancer product allows (the catalog's descriptions, db/seeds/orders.seed.ts):
 * listeners per balancer and backends across all its listeners. Products not named here get the
 * general LIMITS.
 */
export const PLAN_LIMITS: Record<string, { listeners: number; backends: number }> = {
  'lb-s': { listeners: 10, backends: 50 },
};

/** Problems of a set that is valid but larger than the product allows (`param` is `listeners`). */
export function planErrors(product: string | null, listeners: readonly LbListener[]): FieldError[] {
  const plan = (product && PLAN_LIMITS[product]) || null;
  if (!plan) return [];
  const backends = listeners.reduce((n, l) => n + (Array.isArray(l.backends) ? l.backends.length : 0), 0);
  const errors: FieldError[] = [];
  if (listeners.length > plan.listeners) errors.push({ param: 'listeners', message: `this load balancer's plan allows ${plan.listeners} listeners` });
  if (backends > plan.backends)
    errors.push({ param: 'listeners', message: `this load balancer's plan allows ${plan.backends} backends in all (the set has ${backends})` });
  return errors;
}
