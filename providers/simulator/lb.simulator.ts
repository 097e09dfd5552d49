import type { Knex } from 'knex';
import { canonicalIp, listenerErrors, normalizeListeners } from '../lb.rules';
import { BackendGoneError, BackendRefusedError } from '../errors';
import { balancerAddress, type BalancerStatus, type Health, type LbListener, type LbProvider, type LbStats } from '../lb.provider';
import { simulatedDelay } from '../switchboard';

const BACKEND = 'lb';
/** How long things take at SIM_DELAY_SCALE 1: starting a balancer process, checking and reloading a configuration. */
const START_MS = 800;
const APPLY_MS = 300;
const CALL_MS = 20;

interface SimBalancerRow {
  service_id: number;
  address: string;
  state: 'running' | 'stopped';
  listeners: LbListener[];
  backend_health: Record<string, 'down'>;
  started_at: Date | null;
}

const healthKey = (listener: string, ip: string, port: number) => `${listener}|${canonicalIp(ip)}|${port}`;

/**
 * The load-balancer backend without HAProxy (LB_BACKEND=simulator): the same rules and refusals as
 * the real adapter (the listener rules, ports unique per address across balancers), state in
 * PostgreSQL so the API and the worker agree, and SIM_DELAY_SCALE-scaled time. It moves no
 * traffic: counters stay zero, checked backends are `up` unless marked down with `setBackendHealth`.
 * The outage switch is not here: the registry wraps the provider (withOutageSwitch).
 */
export class LbSimulator implements LbProvider {
  constructor(
    private readonly db: Knex,
    private readonly options: { bindAddress: string; delayScale: number },
  ) {}

  async create(serviceId: number, listeners: LbListener[] = []): Promise<BalancerStatus> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const existing = await this.row(this.db, serviceId);
    if (existing) {
      if (existing.state !== 'running') return this.start(serviceId);
      return this.statusOf(existing);
    }
    const address = balancerAddress(this.options.bindAddress, serviceId);
    const set = this.checkRules(listeners, address);
    await simulatedDelay(START_MS, this.options.delayScale);
    await this.db.transaction(async (trx) => {
      await this.refusePortsTaken(trx, serviceId, address, set);
      await trx('sim_lb_balancers')
        .insert({ service_id: serviceId, address, state: 'running', listeners: JSON.stringify(set), started_at: trx.fn.now() })
        .onConflict('service_id')
        .ignore();
    });
    return this.status(serviceId);
  }

  async start(serviceId: number): Promise<BalancerStatus> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const row = await this.requireRow(this.db, serviceId);
    if (row.state !== 'running') {
      await simulatedDelay(START_MS, this.options.delayScale);
      await this.db.transaction(async (trx) => {
        await this.refusePortsTaken(trx, serviceId, row.address, row.listeners, 'start_failed');
        await trx('sim_lb_balancers').where({ service_id: serviceId }).update({ state: 'running', started_at: trx.fn.now() });
      });
    }
    return this.status(serviceId);
  }

  async apply(serviceId: number, listeners: LbListener[]): Promise<LbListener[]> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const row = await this.requireRow(this.db, serviceId);
    const set = this.checkRules(listeners, row.address);
    await simulatedDelay(APPLY_MS, this.options.delayScale);
    return this.db.transaction(async (trx) => {
      const locked = await this.requireRow(trx, serviceId, true);
      await this.refusePortsTaken(trx, serviceId, locked.address, set);
      // Marks of backends that are no longer in the set are forgotten with them.
      const keep = new Set(set.flatMap((l) => l.backends.map((b) => healthKey(l.name, b.ip, b.port))));
      const health = Object.fromEntries(Object.entries(locked.backend_health).filter(([key]) => keep.has(key)));
      await trx('sim_lb_balancers')
        .where({ service_id: serviceId })
        .update({ listeners: JSON.stringify(set), backend_health: JSON.stringify(health) });
      return set;
    });
  }

  async listeners(serviceId: number): Promise<LbListener[]> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    return (await this.requireRow(this.db, serviceId)).listeners;
  }

  async status(serviceId: number): Promise<BalancerStatus> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    return this.statusOf(await this.requireRow(this.db, serviceId));
  }

  async stats(serviceId: number): Promise<LbStats> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    return statsOf(await this.requireRow(this.db, serviceId));
  }

  async stop(serviceId: number): Promise<void> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    await this.db('sim_lb_balancers').where({ service_id: serviceId }).update({ state: 'stopped', started_at: null });
  }

  async destroy(serviceId: number): Promise<void> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    await this.db('sim_lb_balancers').where({ service_id: serviceId }).delete();
  }

  /** Fault injection (dev route, tests): a backend stops (or starts again) answering its health checks. */
  async setBackendHealth(serviceId: number, listener: string, ip: string, port: number, health: 'up' | 'down'): Promise<void> {
    await this.db.transaction(async (trx) => {
      const row = await this.requireRow(trx, serviceId, true);
      const marks = { ...row.backend_health };
      if (health === 'down') marks[healthKey(listener, ip, port)] = 'down';
      else delete marks[healthKey(listener, ip, port)];
      await trx('sim_lb_balancers')
        .where({ service_id: serviceId })
        .update({ backend_health: JSON.stringify(marks) });
    });
  }

  private checkRules(listeners: LbListener[], address: string): LbListener[] {
    const errors = listenerErrors(listeners, { address });
    if (errors.length > 0) throw new BackendRefusedError(BACKEND, errors[0].message, 'validation_failed', errors[0].param);
    return normalizeListeners(listeners);
  }

  /** Balancers sharing an address (a single LB_BIND_ADDRESS) cannot both listen on one port. */
  private async refusePortsTaken(trx: Knex.Transaction, serviceId: number, address: string, set: LbListener[], code = 'validation_failed'): Promise<void> {
    // One transaction at a time per address decides, so two balancers cannot take a port together.
    await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`sim_lb:${address}`]);
    const others: Array<Pick<SimBalancerRow, 'listeners'>> = await trx('sim_lb_balancers')
      .where({ address, state: 'running' })
      .whereNot({ service_id: serviceId })
      .select('listeners');
    const taken = new Set(others.flatMap((o) => o.listeners.map((l) => l.port)));
    for (const [i, listener] of set.entries()) {
      if (taken.has(listener.port)) {
        throw new BackendRefusedError(
          BACKEND,
          `port ${listener.port} is already in use on ${address}`,
          code,
          code === 'validation_failed' ? `listeners.${i}.port` : null,
        );
      }
    }
  }

  private async row(db: Knex, serviceId: number, forUpdate = false): Promise<SimBalancerRow | null> {
    const query = db('sim_lb_balancers').where({ service_id: serviceId }).first();
    const row: SimBalancerRow | undefined = await (forUpdate ? query.forUpdate() : query);
    return row ? { ...row, service_id: Number(row.service_id) } : null;
  }

  private async requireRow(db: Knex, serviceId: number, forUpdate = false): Promise<SimBalancerRow> {
    const row = await this.row(db, serviceId, forUpdate);
    if (!row) throw new BackendGoneError(BACKEND, `load balancer svc_${serviceId}`);
    return row;
  }

  private statusOf(row: SimBalancerRow): BalancerStatus {
    const running = row.state === 'running';
    return {
      serviceId: row.service_id,
      address: row.address,
      state: row.state,
      listenerCount: row.listeners.length,
      healthy: running ? statsOf(row).listeners.every((l) => l.state === 'up') : false,
    };
  }
}

function statsOf(row: SimBalancerRow): LbStats {
  const running = row.state === 'running';
  return {
    listeners: row.listeners.map((listener) => {
      const backends = listener.backends.map((b) => {
        // As in HAProxy, only a checked backend can be seen failing; an unchecked one stays `unknown`.
        const health: Health =
          !running || !listener.health_check ? 'unknown' : row.backend_health[healthKey(listener.name, b.ip, b.port)] === 'down' ? 'down' : 'up';
        return { ip: b.ip, port: b.port, health };
      });
      const state: Health = !running ? 'down' : backends.every((b) => b.health === 'down') ? 'down' : 'up';
      return { name: listener.name, state, currentConnections: 0, bytesIn: 0, bytesOut: 0, backends };
    }),
  };
}
