import { defineBackend } from './backend';
import { HaproxyLbProvider } from './haproxy/haproxy.adapter';
import type { LbProvider } from './lb.provider';
import { LbSimulator } from './simulator/lb.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** Load balancers: one HAProxy process each (LB_BACKEND=haproxy) or the simulator. */
    lb: LbProvider;
  }
}

/** The load-balancer family's backend: an HAProxy per balancer (LB_BACKEND=haproxy) or the simulator. */
export const lbBackend = defineBackend<'lb', HaproxyLbProvider>({
  family: 'lb',
  key: 'lb',
  simulator: ({ db, config }) => new LbSimulator(db, { bindAddress: config.LB_BIND_ADDRESS, delayScale: config.SIM_DELAY_SCALE }),
  real: {
    selected: (config) => config.LB_BACKEND !== 'simulator',
    create: ({ config, targets }) => new HaproxyLbProvider({ dataDir: config.LB_DATA_DIR, bindAddress: config.LB_BIND_ADDRESS, targets }),
    // Every call names the balancer's service first.
    placed: {
      object: 'load_balancer',
      serviceOf: (_method, args) => args[0] as number,
      localServices: (adapter) => adapter.balancerIds(),
      moveWorkflow: 'lbMoveWorkflow',
      calls: ['create', 'start', 'apply', 'listeners', 'status', 'stats', 'stop', 'destroy'],
    },
  },
});
