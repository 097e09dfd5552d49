import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { Logger } from '../../common/logger';
import { leastLoadedHost, movePlacement, placementOf } from '../../domain/hosts/registry';
import { adminPassword, findInstance, recordConnection } from '../../domain/dbaas/store';
import type { Providers } from '../../providers';
import type { DbaasProvider } from '../../providers/dbaas.provider';

/** What a move of a database instance starts from. */
export interface DbaasMovePlan {
  from: string;
  to: string;
  instance: string;
}

const CHUNK_ROWS_PER_READ = 8;

/**
 * Activities of a database instance's move to another host (docs/hosts.md "Moving"): freeze the
 * instance on its host (no client reaches it, so the dump misses no write), dump it there into
 * `host_transfers`, build the same instance on the new host and replay the dump, check every database
 * arrived, switch placement and connection details, destroy the old copy. Each runs on the host it
 * names, on that host's own adapter (`providers.local`): the placement says the other host while
 * they run. Each is idempotent (a key per move for the dump, chunks replaced, create by name).
 */
export function createDbaasMoveActivities({ db, providers, keyring, logger }: { db: Knex; providers: Providers; keyring: Keyring; logger: Logger }) {
  const local = (): Required<DbaasProvider> => {
    const dbaas = providers.local.dbaas;
    if (!dbaas?.freeze || !dbaas.thaw || !dbaas.readBackup || !dbaas.restoreDump)
      throw ApplicationFailure.nonRetryable('this worker is not the agent of a host that runs database instances', 'NotAHost');
    return dbaas as Required<DbaasProvider>;
  };
  const heartbeat = (detail?: unknown) => {
    try {
      Context.current().heartbeat(detail);
    } catch {
      // Outside an activity (a direct call): nothing to beat.
    }
  };

  /** Runs `fn` while beating every second (an instance's build or a restore says nothing for seconds). */
  const beating = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    const timer = setInterval(() => heartbeat(what), 1_000);
    try {
      return await fn();
    } finally {
      clearInterval(timer);
    }
  };

  return {
    /** Where the instance is, where it goes (`to`, or the host placement would choose now, its own left out). */
    async dbaasMovePlan(input: { serviceId: number; to?: string | null }): Promise<DbaasMovePlan> {
      const placement = await placementOf(db, input.serviceId);
      const row = await findInstance(db, input.serviceId);
      if (!placement || !row) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no database instance placed on a host`, 'NotPlaced');
      const to = input.to ?? (await leastLoadedHost(db, 'dbaas', [placement.host]));
      if (!to) throw ApplicationFailure.nonRetryable('no other host that serves dbaas is up, undrained and has room', 'NoHost');
      return { from: placement.host, to, instance: row.instance };
    },

    /** On the old host: the server restarted on its private socket only (every session ends). */
    async dbaasFreeze(input: { instance: string }): Promise<void> {
      await local().freeze(input.instance);
    },

    /** On the old host: the server restarted as it normally runs (a move that did not complete). */
    async dbaasThaw(input: { instance: string }): Promise<void> {
      await local().thaw(input.instance);
    },

    /**
     * On the old host: a dump of the whole instance (the backup tool, key `move:<transfer>`), into
     * `host_transfers` in order. Returns its size and the databases it holds, for the import's check.
     */
    async dbaasExport(input: { instance: string; transferId: string }): Promise<{ bytes: number; databases: string[] }> {
      const dbaas = local();
      const started = await dbaas.startBackup(input.instance, `move:${input.transferId}`);
      for (;;) {
        const backup = (await dbaas.listBackups(input.instance)).find((b) => b.id === started.id);
        if (backup?.status === 'completed') break;
        if (!backup || backup.status === 'failed') throw ApplicationFailure.nonRetryable(`the dump of ${input.instance} did not complete`, 'DumpFailed');
        heartbeat('dumping');
        await new Promise((r) => setTimeout(r, dbaas.pollIntervalMs));
      }
      await db('host_transfers').where({ transfer_id: input.transferId }).delete();
      let seq = 0;
      let bytes = 0;
      for await (const chunk of await dbaas.readBackup(input.instance, started.id)) {
        await db('host_transfers').insert({ transfer_id: input.transferId, seq: seq++, data: chunk });
        bytes += chunk.length;
        heartbeat({ bytes });
      }
      const databases = (await dbaas.listDatabases(input.instance)).map((d) => d.name).sort();
      return { bytes, databases };
    },

    /**
     * On the new host: the same instance (name, engine, admin password), the dump replayed into it,
     * checked to hold every database the old one had. Returns how clients reach it here.
     */
    async dbaasImport(input: { serviceId: number; transferId: string; databases: string[] }) {
      const dbaas = local();
      const row = await findInstance(db, input.serviceId);
      if (!row) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no database instance any more`, 'Gone');
      await beating('building', () =>
        dbaas.createInstance({
          name: row.instance,
          serviceId: input.serviceId,
          engine: row.engine,
          adminUsername: row.admin_username,
          adminPassword: adminPassword(keyring, row),
        }),
      );
      async function* chunks(): AsyncIterable<Buffer> {
        for (let from = 0; ; from += CHUNK_ROWS_PER_READ) {
          const rows: Array<{ data: Buffer }> = await db('host_transfers')
            .where({ transfer_id: input.transferId })
            .andWhere('seq', '>=', from)
            .andWhere('seq', '<', from + CHUNK_ROWS_PER_READ)
            .orderBy('seq')
            .select('data');
          for (const r of rows) yield r.data;
          heartbeat({ restored: from });
          if (rows.length < CHUNK_ROWS_PER_READ) return;
        }
      }
      await beating('restoring', () => dbaas.restoreDump(row.instance, chunks()));
      const here = new Set((await dbaas.listDatabases(row.instance)).map((d) => d.name));
      const missing = input.databases.filter((name) => !here.has(name));
      if (missing.length) throw ApplicationFailure.nonRetryable(`the restore on this host lacks ${missing.join(', ')}`, 'RestoreIncomplete');
      const info = await dbaas.connectionInfo(row.instance);
      return { host: info.host, port: info.port, database: info.database, username: info.username, tlsMode: info.tlsMode, caCertificate: info.caCertificate };
    },

    /** On the new host: its copy destroyed (a move that did not complete). */
    async dbaasDiscard(input: { instance: string }): Promise<void> {
      await local().destroyInstance(input.instance);
    },

    /** The placement, the connection details and the service's address, pointed at the new host. */
    async dbaasSwitchHost(input: {
      serviceId: number;
      to: string;
      connection: { host: string; port: number; database: string | null; username: string; tlsMode: 'verify-full'; caCertificate: string };
    }): Promise<void> {
      await db.transaction(async (trx) => {
        await movePlacement(trx, input.serviceId, input.to);
        await recordConnection(trx, input.serviceId, input.connection);
        await trx('services').where({ id: input.serviceId }).update({ primary_ip: input.connection.host });
      });
      logger.info({ service: `svc_${input.serviceId}`, host: input.to, address: input.connection.host }, 'database instance moved');
    },

    /** On the old host: its copy destroyed, data and backups with it. */
    async dbaasDestroyHere(input: { instance: string }): Promise<void> {
      await local().destroyInstance(input.instance);
    },

    /** The transfer's chunks, gone (whatever the move's outcome). */
    async dbaasDropTransfer(input: { transferId: string }): Promise<void> {
      await db('host_transfers').where({ transfer_id: input.transferId }).delete();
    },
  };
}

export type DbaasMoveActivities = ReturnType<typeof createDbaasMoveActivities>;
