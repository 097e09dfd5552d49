import { WorkflowFailedError } from '@temporalio/client';
import { loadConfig } from '../common/config';
import { parseNumericId } from '../common/ids';
import { createDb } from '../db/knex';
import { HostPlacements } from '../domain/hosts/directory';
import { MoveRefused, startMove } from '../domain/hosts/move';
import { listHosts, setDraining } from '../domain/hosts/registry';
import { placedFamilies } from '../families';
import { TemporalGateway } from '../infra/temporal';

/**
 * The operator's command for hosts (docs/hosts.md), against the database (and Temporal for a move)
 * of the environment it runs in:
 *
 *   npm run hosts                      the hosts, their status and what is placed on them
 *   npm run hosts -- drain <host>      no new placements there (what it has stays and is served)
 *   npm run hosts -- undrain <host>
 *   npm run hosts -- move svc_<n> [<host>]   move a service's server (a balancer) to another host
 */
const USAGE = 'usage: npm run hosts [-- list | drain <host> | undrain <host> | move svc_<n> [<host>]]';

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
        const temporal = new TemporalGateway({
          address: config.TEMPORAL_ADDRESS,
          namespace: config.TEMPORAL_NAMESPACE,
          taskQueue: config.TEMPORAL_TASK_QUEUE,
          useSearchAttributes: config.TEMPORAL_SEARCH_ATTRIBUTES,
        });
        try {
          const hosts = new HostPlacements(db, null, placedFamilies(config));
          const started = await startMove({ db, temporal, hosts }, serviceId, args[1]);
          console.log(`moving svc_${serviceId} (${started.family}) away from ${started.from}: workflow ${started.workflowId} (Temporal UI)`);
          const result = await temporal.client.workflow.getHandle(started.workflowId).result();
          console.log(`svc_${serviceId} is on ${result.to} now${result.address ? `, at ${result.address}` : ''}`);
          return 0;
        } catch (err) {
          if (err instanceof MoveRefused) {
            console.error(err.message);
            return 1;
          }
          if (err instanceof WorkflowFailedError) {
            console.error(`the move failed, and what it had done was undone: ${err.cause?.message ?? err.message}`);
            return 1;
          }
          throw err;
        } finally {
          await temporal.close();
        }
      }
    }
    console.error(USAGE);
    return 2;
  } finally {
    await db.destroy();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
