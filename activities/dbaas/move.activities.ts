import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { Logger } from '../../common/logger';
import { movePlacement } from '../../domain/hosts/registry';
import { claimMoveOrFail } from '../hosts/activities';
import { BackendGoneError } from '../../providers/errors';
import { adminPassword, findInstance, recordConnection } from '../../domain/dbaas/store';
import type { Providers } from '../../providers';
import type { DbaasProvider, DbConnectionInfo } from '../../providers/dbaas.provider';

/** What a move of a database instance starts from. */
export interface DbaasMovePlan {
  from: string;
  to: string;
  instance: string;
}

const CHUNK_ROWS_PER_READ = 8;

/**
 * Activities of a database instance's move to another host (docs/hosts.md "Moving"): mark it moving
 * (calls about it answer 503 from then on), stop it on its host and copy its files (data and
 * backups) into `host_transfers`, build the same instance on the new host and put the files in,
 * check every database arrived, switch placement and connection details, destroy the old copy. Each
 * runs on the host it names, on that host's own adapter (`providers.local`): the placement says the
 * other host while they run. Each is idempotent (chunks replaced, instances made by name, files
 * replaced whole).
 */
export function createDbaasMoveActivities({ db, providers, keyring, logger }: { db: Knex; providers: Providers; keyring: Keyring; logger: Logger }) {
  const local = (): Required<DbaasProvider> => {
    const dbaas = providers.local.dbaas;
    if (!dbaas?.exportFiles || !dbaas.importFiles)
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
  /** Runs `fn` while beating every second (an instance's build says nothing for seconds). */
  const beating = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    const timer = setInterval(() => heartbeat(what), 1_000);
    try {
      return await fn();
    } finally {
      clearInterval(timer);
    }
  };
  const build = async (serviceId: number) => {
    const row = await findInstance(db, serviceId);
    if (!row) throw ApplicationFailure.nonRetryable(`svc_${serviceId} has no database instance any more`, 'Gone');
    await beating('building', () =>
      local().createInstance({
        name: row.instance,
        serviceId,
        engine: row.engine,
        adminUsername: row.admin_username,
        adminPassword: adminPassword(keyring, row),
      }),
    );
    return row;
  };

  return {
    /**
     * Where the instance is and where it goes (`to`, or the host placement would choose now, its own
     * left out), and marks it moving: refused while another move of it runs.
     */
    async dbaasMovePlan(input: { serviceId: number; to?: string | null }): Promise<DbaasMovePlan> {
      const row = await findInstance(db, input.serviceId);
      if (!row) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no database instance`, 'NotPlaced');
      const { from, to } = await claimMoveOrFail(db, 'dbaas', input.serviceId, input.to);
      return { from, to, instance: row.instance };
    },

    /** On the old host: the databases it holds, for the check on the new host (it must answer to move). */
    async dbaasDatabasesHere(input: { instance: string }): Promise<string[]> {
      return (await local().listDatabases(input.instance)).map((d) => d.name).sort();
    },

    /** On the old host: its server stopped, and its files, as a tar, into `host_transfers` in order. */
    async dbaasExport(input: { instance: string; transferId: string }): Promise<{ bytes: number }> {
      const dbaas = local();
      await db('host_transfers').where({ transfer_id: input.transferId }).delete();
      let seq = 0;
      // Beating throughout: the stop alone may take a while.
      const bytes = await beating('copying', () =>
        dbaas.exportFiles(input.instance, async (chunk) => {
          await db('host_transfers').insert({ transfer_id: input.transferId, seq: seq++, data: chunk });
        }),
      );
      return { bytes };
    },

    /**
     * On the new host: the same instance (name, engine, admin password) with the old one's files,
     * started, checked to hold every database the old one had. Returns how clients reach it here.
     */
    async dbaasImport(input: { serviceId: number; transferId: string; databases: string[] }): Promise<DbConnectionInfo> {
      const row = await findInstance(db, input.serviceId);
      if (!row) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no database instance any more`, 'Gone');
      // Built once: a retry finds it (maybe with half its files, which would not start) and goes on to the files.
      const exists = await local()
        .status(row.instance)
        .then(
          () => true,
          (err: unknown) => !(err instanceof BackendGoneError),
        );
      if (!exists) await build(input.serviceId);
      async function* chunks(): AsyncIterable<Buffer> {
        for (let from = 0; ; from += CHUNK_ROWS_PER_READ) {
          const rows: Array<{ data: Buffer }> = await db('host_transfers')
            .where({ transfer_id: input.transferId })
            .andWhere('seq', '>=', from)
            .andWhere('seq', '<', from + CHUNK_ROWS_PER_READ)
            .orderBy('seq')
            .select('data');
          for (const r of rows) yield r.data;
          heartbeat({ imported: from });
          if (rows.length < CHUNK_ROWS_PER_READ) return;
        }
      }
      await beating('importing', () => local().importFiles(row.instance, chunks()));
      // Started again with this host's configuration; the admin's password and the platform's own
      // accounts set as this control plane keeps them.
      await build(input.serviceId);
      const here = new Set((await local().listDatabases(row.instance)).map((d) => d.name));
      const missing = input.databases.filter((name) => !here.has(name));
      if (missing.length) throw ApplicationFailure.nonRetryable(`the copy on this host lacks ${missing.join(', ')}`, 'CopyIncomplete');
      return local().connectionInfo(row.instance);
    },

    /** On the old host: its server started again (a move that did not complete; gone is fine). */
    async dbaasRestartHere(input: { instance: string }): Promise<void> {
      await local()
        .startInstance(input.instance)
        .catch((err: unknown) => {
          if (!(err instanceof BackendGoneError)) throw err;
        });
    },

    /** On the new host: its copy destroyed (a move that did not complete). */
    async dbaasDiscard(input: { instance: string }): Promise<void> {
      await local().destroyInstance(input.instance);
    },

    /** The placement (which ends the move), the connection details and the service's address, pointed at the new host. */
    async dbaasSwitchHost(input: { serviceId: number; to: string; connection: DbConnectionInfo }): Promise<void> {
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
