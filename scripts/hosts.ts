import { WorkflowFailedError } from '@temporalio/client';
import { loadConfig, type Config } from '../common/config';
import { parseNumericId } from '../common/ids';
import { createDb, type Db } from '../db/knex';
import { HostPlacements } from '../domain/hosts/directory';
import { MoveRefused, startMove } from '../domain/hosts/move';
import { listHosts, setDraining } from '../domain/hosts/registry';
import { placedFamilies } from '../families';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';

/**
 * The operator's command for hosts (docs/hosts.md), against the database (and Temporal for a move)
 * of the environment it runs in:
 *
 *   npm run hosts                      the hosts, their status and what is placed on them
 *   npm run hosts -- drain <host>      no new placements there (what it has stays and is served)
 *   npm run hosts -- undrain <host>
 *   npm run hosts -- move svc_<n> [<host>]   move a service's server to another host
 *   npm run hosts -- evacuate <host>   drain it, then move everything it has, one at a time
 */
const USAGE = 'usage: npm run hosts [-- list | drain <host> | undrain <host> | move svc_<n> [<host>] | evacuate <host>]';

async function main(): Promise<number> {
  const [command = 'list', ...args] = process.argv.slice(2);
  const config = loadConfig();
  const db = createDb(config.DATABASE_URL);
  try {
    switch (command) {
      case 'list': {
        const hosts = await listHosts(db);
        if (hosts.length === 0) console.log('no host has registered (a worker registers its host when it starts)');
        for (const h of hosts) {
          const placed = h.placements.map((p) => `svc_${p.service_id} (${p.family})`).join(', ') || 'nothing';
          console.log(
            `${h.name}  ${h.status}  serves ${h.families.join(',')}  ${h.placements.length}/${h.capacity.resources}  last beat ${h.heartbeat_at.toISOString()}`,
          );
          console.log(`    ${placed}`);
        }
        return 0;
      }
      case 'drain':
      case 'undrain': {
        if (args.length !== 1) break;
        const host = await setDraining(db, args[0], command === 'drain');
        if (!host) {
          console.error(`no host ${args[0]}`);
          return 1;
        }
        console.log(`${host.name} is ${host.status}${command === 'drain' ? ': no new placements there; what it has stays' : ''}`);
        return 0;
      }
      case 'move': {
        const serviceId = args[0] ? parseNumericId('svc', args[0]) : null;
        if (serviceId === null || args.length > 2) break;
        return await withTemporal(config, (temporal) => move(db, config, temporal, serviceId, args[1]));
      }
      case 'evacuate': {
        if (args.length !== 1) break;
        const host = await setDraining(db, args[0], true);
        if (!host) {
          console.error(`no host ${args[0]}`);
          return 1;
        }
        console.log(`${host.name} is drained; moving its ${host.placements.length} resource(s), one at a time`);
        return await withTemporal(config, async (temporal) => {
          let failed = 0;
          for (const p of host.placements) failed += await move(db, config, temporal, p.service_id);
          console.log(failed ? `${failed} resource(s) stay on ${host.name}` : `${host.name} has nothing placed on it now`);
          return failed ? 1 : 0;
        });
      }
    }
    console.error(USAGE);
    return 2;
  } finally {
    await db.destroy();
  }
}

async function withTemporal(config: Config, fn: (temporal: TemporalGateway) => Promise<number>): Promise<number> {
  const temporal = new TemporalGateway(temporalOptionsOf(config));
  try {
    return await fn(temporal);
  } finally {
    await temporal.close();
  }
}

/** Moves one service's server and waits for the move's end; 0 when it moved, 1 when it did not (said why). */
async function move(db: Db, config: Config, temporal: TemporalGateway, serviceId: number, to?: string): Promise<number> {
  try {
    const hosts = new HostPlacements(db, null, placedFamilies(config));
    const started = await startMove({ db, temporal, hosts }, serviceId, to);
    console.log(`moving svc_${serviceId} (${started.family}) away from ${started.from}: workflow ${started.workflowId} (Temporal UI)`);
    const result = await temporal.client.workflow.getHandle(started.workflowId).result();
    console.log(`svc_${serviceId} is on ${result.to} now${result.address || result.host ? `, at ${result.address || result.host}` : ''}`);
    return 0;
  } catch (err) {
    if (err instanceof MoveRefused) {
      console.error(`svc_${serviceId}: ${err.message}`);
      return 1;
    }
    if (err instanceof WorkflowFailedError) {
      console.error(`svc_${serviceId}: the move failed, and what it had done was undone: ${err.cause?.message ?? err.message}`);
      return 1;
    }
    throw err;
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
