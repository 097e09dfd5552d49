/**
 * The real DBaaS backend: every instance is its own PostgreSQL or MariaDB server process on this
 * machine, with its own data directory, loopback port, private control socket and TLS
 * certificate (layout in engine.ts). Servers run detached, so they outlive the API and worker
 * processes; any process finds them again through their pidfiles (`resumeInstances` starts the
 * ones that should run, e.g. after a reboot). Lifecycle changes take a lock file per instance,
 * shared by the API and the worker.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type {
  DbBackup,
  DbConnectionInfo,
  DbDatabase,
  DbEngine,
  DbInstanceStatus,
  DbLogEntry,
  DbStats,
  DbUser,
  DbUserRef,
  DbaasProvider,
  NewDbDatabase,
  NewDbInstance,
} from '../dbaas.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError, isBackendError } from '../errors';
import { instancePaths, type EngineDriver, type Instance, type InstancePaths, type InstanceRecord } from './engine';
import { MariaDbEngine } from './mariadb.engine';
import { PostgresEngine } from './postgresql.engine';
import { CommandError, exists, freeLoopbackPort, processAlive, spawnDetached, tailLines, withFileLock } from './system';
import { ensureCertificateAuthority, issueServerCertificate, readCaCertificate } from './tls';

const BACKEND = 'dbaas';
/** Instance names become directory names. */
const INSTANCE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** `20261123T101500Z-3f9a1c`: sorts by time, safe as a file name and in a URL. */
export const BACKUP_ID_PATTERN = /^\d{8}T\d{6}Z-[0-9a-f]{6}$/;

export interface DbInstancesOptions {
  /** Where instances live: `.data/dbaas` for `npm start`, a temporary directory in tests. */
  rootDir: string;
  /** The address clients are given (the servers listen on 127.0.0.1). */
  host?: string;
  pollIntervalMs?: number;
  /** A PostgreSQL bin directory; the highest installed major version when omitted. */
  postgresBinDir?: string;
}

interface BackupMeta {
  id: string;
  key: string;
  createdAt: string;
  /** The process running the dump (a shell whose name carries the backup id). */
  pid: number | null;
}

const backupMarker = (id: string) => `dbaas-backup-${id}`;

// Runs the dump into a partial file and renames it when the tool succeeds: the final file's
// presence is the backup's completion, whichever process looks.
const DUMP_SCRIPT = '"$@" > "$DUMP_PARTIAL" 2> "$DUMP_ERRORS" && mv "$DUMP_PARTIAL" "$DUMP_FINAL"';

function unavailable(err: unknown, instance: string): never {
  if (isBackendError(err)) throw err;
  if (err instanceof CommandError) throw new BackendUnavailableError(BACKEND, `instance ${instance}: ${err.message}`);
  throw err;
}

export class DbInstancesAdapter implements DbaasProvider {
  readonly pollIntervalMs: number;
  private readonly host: string;
  private readonly root: string;
  private enginesCache: Record<DbEngine, EngineDriver> | null = null;

  constructor(private readonly opts: DbInstancesOptions) {
    this.root = path.resolve(opts.rootDir);
    this.host = opts.host ?? '127.0.0.1';
    this.pollIntervalMs = opts.pollIntervalMs ?? 500;
  }

  /** Engines are made on first use: looking up binaries must not fail a process that never uses them. */
  private get engines(): Record<DbEngine, EngineDriver> {
    this.enginesCache ??= { postgresql: new PostgresEngine(this.opts.postgresBinDir), mysql: new MariaDbEngine() };
    return this.enginesCache;
  }

  private async ensureRoot(): Promise<void> {
    // Traversable (not listable) by the servers' accounts, which own their instance directories.
    await fs.mkdir(path.join(this.root, 'instances'), { recursive: true, mode: 0o711 });
    await fs.chmod(this.root, 0o711);
    await fs.chmod(path.join(this.root, 'instances'), 0o711);
  }

  private async readRecord(paths: InstancePaths): Promise<InstanceRecord | null> {
    try {
      return JSON.parse(await fs.readFile(paths.record, 'utf8')) as InstanceRecord;
    } catch {
      return null;
    }
  }

  private async writeRecord(paths: InstancePaths, rec: InstanceRecord): Promise<void> {
    const tmp = `${paths.record}.tmp`;
    await fs.writeFile(tmp, `${JSON.stringify(rec, null, 2)}\n`, { mode: 0o644 });
    await fs.rename(tmp, paths.record);
  }

  private async load(id: string): Promise<{ inst: Instance; driver: EngineDriver }> {
    if (!INSTANCE_NAME.test(id)) throw new BackendGoneError(BACKEND, `instance ${id}`);
    const paths = instancePaths(this.root, id);
    const rec = await this.readRecord(paths);
    if (!rec) throw new BackendGoneError(BACKEND, `instance ${id}`);
    return { inst: { rec, paths }, driver: this.engines[rec.engine] };
  }

  /** The instance, which must be answering: a server that is down or starting is unavailable. */
  private async answering(id: string): Promise<{ inst: Instance; driver: EngineDriver }> {
    const loaded = await this.load(id);
    if (!(await loaded.driver.isRunning(loaded.inst))) throw new BackendUnavailableError(BACKEND, `instance ${id} is not running`);
    return loaded;
  }

  private async setDesired(inst: Instance, desired: InstanceRecord['desired']): Promise<void> {
    if (inst.rec.desired === desired) return;
    inst.rec.desired = desired;
    await this.writeRecord(inst.paths, inst.rec);
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  async createInstance(spec: NewDbInstance): Promise<DbInstanceStatus> {
    if (!INSTANCE_NAME.test(spec.name)) throw new BackendRefusedError(BACKEND, `invalid instance name "${spec.name}"`, 'validation_failed', 'name');
    await this.ensureRoot();
    const ca = await ensureCertificateAuthority(this.root);
    const paths = instancePaths(this.root, spec.name);
    return withFileLock(paths.lock, async () => {
      const driver = this.engines[spec.engine];
      let rec = await this.readRecord(paths);
      if (rec && rec.engine !== spec.engine)
        throw new BackendRefusedError(BACKEND, `instance ${spec.name} already exists with engine ${rec.engine}`, 'already_exists');
      if (!rec) {
        // A directory without its record is what an attempt that died half way left behind.
        await fs.rm(paths.dir, { recursive: true, force: true });
        await fs.mkdir(paths.dir, { mode: 0o700 });
        rec = {
          name: spec.name,
          engine: spec.engine,
          serviceId: spec.serviceId,
          port: await freeLoopbackPort(),
          adminUsername: spec.adminUsername,
          createdAt: new Date().toISOString(),
          desired: 'running',
        };
        const inst = { rec, paths };
        try {
          const tls = await issueServerCertificate(ca, paths.tls, {
            commonName: spec.name,
            ips: ['127.0.0.1'],
            dnsNames: ['localhost'],
            owner: await driver.account(),
          });
          await driver.initialize(inst, tls);
          await this.writeRecord(paths, rec);
        } catch (err) {
          await fs.rm(paths.dir, { recursive: true, force: true });
          unavailable(err, spec.name);
        }
      }
      const inst = { rec, paths };
      try {
        await this.setDesired(inst, 'running');
        await driver.start(inst);
        await driver.ensureAdmin(inst, spec.adminPassword);
        return await this.statusOf(inst, driver);
      } catch (err) {
        unavailable(err, spec.name);
      }
    });
  }

  async startInstance(id: string): Promise<void> {
    const { inst, driver } = await this.load(id);
    await withFileLock(inst.paths.lock, async () => {
      await this.setDesired(inst, 'running');
      await driver.start(inst).catch((err) => unavailable(err, id));
    });
  }

  async stopInstance(id: string): Promise<void> {
    const { inst, driver } = await this.load(id);
    await withFileLock(inst.paths.lock, async () => {
      await this.setDesired(inst, 'stopped');
      await driver.stop(inst).catch((err) => unavailable(err, id));
    });
  }

  async restartInstance(id: string): Promise<void> {
    const { inst, driver } = await this.load(id);
    await withFileLock(inst.paths.lock, async () => {
      await this.setDesired(inst, 'running');
      await driver.restart(inst).catch((err) => unavailable(err, id));
    });
  }

  async destroyInstance(id: string): Promise<void> {
    if (!INSTANCE_NAME.test(id)) return;
    const paths = instancePaths(this.root, id);
    if (!(await exists(paths.dir))) return;
    await withFileLock(paths.lock, async () => {
      const rec = await this.readRecord(paths);
      if (rec) {
        const inst = { rec, paths };
        await this.engines[rec.engine].stop(inst).catch((err) => unavailable(err, id));
        for (const meta of await this.backupMetas(inst)) {
          if (meta.pid && (await processAlive(meta.pid, backupMarker(meta.id)))) process.kill(meta.pid, 'SIGTERM');
        }
      }
      await fs.rm(paths.dir, { recursive: true, force: true });
    });
  }

  /**
   * Starts every instance that should be running and is not (after a reboot, or a crash): the
   * instances outlive the processes that manage them, and this is how those processes take them
   * back. Returns what it started and what failed.
   */
  async resumeInstances(): Promise<{ started: string[]; failed: Array<{ name: string; error: string }> }> {
    const started: string[] = [];
    const failed: Array<{ name: string; error: string }> = [];
    for (const name of await this.instanceNames()) {
      try {
        const { inst, driver } = await this.load(name);
        if (inst.rec.desired !== 'running' || (await driver.isRunning(inst))) continue;
        await this.startInstance(name);
        started.push(name);
      } catch (err) {
        failed.push({ name, error: (err as Error).message });
      }
    }
    return { started, failed };
  }

  /** Names of the instances on this machine. */
  async instanceNames(): Promise<string[]> {
    const entries = await fs.readdir(path.join(this.root, 'instances'), { withFileTypes: true }).catch(() => []);
    const names: string[] = [];
    for (const e of entries) if (e.isDirectory() && INSTANCE_NAME.test(e.name) && (await exists(instancePaths(this.root, e.name).record))) names.push(e.name);
    return names.sort();
  }

  // ---- reads -----------------------------------------------------------------------------------

  private async statusOf(inst: Instance, driver: EngineDriver): Promise<DbInstanceStatus> {
    const vitals = await driver.vitals(inst);
    return {
      id: inst.rec.name,
      engine: inst.rec.engine,
      state: 'running',
      version: vitals.version,
      host: this.host,
      port: inst.rec.port,
      uptimeSeconds: vitals.uptimeSeconds,
    };
  }

  async status(id: string): Promise<DbInstanceStatus> {
    const { inst, driver } = await this.answering(id);
    return this.statusOf(inst, driver);
  }

  async connectionInfo(id: string): Promise<DbConnectionInfo> {
    const { inst, driver } = await this.load(id);
    const caCertificate = await readCaCertificate({ certFile: path.join(this.root, 'ca', 'ca.crt'), keyFile: '' });
    return {
      host: this.host,
      port: inst.rec.port,
      database: driver.defaultDatabase,
      username: inst.rec.adminUsername,
      tlsMode: 'verify-full',
      caCertificate,
    };
  }

  async listDatabases(id: string): Promise<DbDatabase[]> {
    const { inst, driver } = await this.answering(id);
    return driver.listDatabases(inst);
  }

  async createDatabase(id: string, spec: NewDbDatabase): Promise<DbDatabase> {
    const { inst, driver } = await this.answering(id);
    return driver.createDatabase(inst, spec);
  }

  async deleteDatabase(id: string, name: string): Promise<void> {
    const { inst, driver } = await this.answering(id);
    await driver.deleteDatabase(inst, name);
  }

  async listUsers(id: string): Promise<DbUser[]> {
    const { inst, driver } = await this.answering(id);
    return driver.listUsers(inst);
  }

  async createUser(id: string, spec: { username: string; password: string }): Promise<DbUser> {
    const { inst, driver } = await this.answering(id);
    return driver.createUser(inst, spec.username, spec.password);
  }

  async deleteUser(id: string, user: DbUserRef): Promise<void> {
    const { inst, driver } = await this.answering(id);
    await driver.deleteUser(inst, user);
  }

  async setPassword(id: string, user: DbUserRef, password: string): Promise<void> {
    const { inst, driver } = await this.answering(id);
    await driver.setPassword(inst, user, password);
  }

  /** Read from the log file, so it also works while the server is down (when it matters most). */
  async logs(id: string, lines: number): Promise<DbLogEntry[]> {
    const { inst, driver } = await this.load(id);
    const file = driver.logFile(inst);
    if (!(await exists(file))) return [];
    const { lines: raw } = await tailLines(file, (ls) => driver.parseLog(ls).length > lines);
    const entries = driver.parseLog(raw);
    return entries.slice(Math.max(0, entries.length - lines));
  }

  async stats(id: string): Promise<DbStats> {
    const { inst, driver } = await this.answering(id);
    return driver.stats(inst);
  }

  // ---- backups ---------------------------------------------------------------------------------

  private async backupMetas(inst: Instance): Promise<BackupMeta[]> {
    const files = await fs.readdir(inst.paths.backups).catch(() => [] as string[]);
    const metas: BackupMeta[] = [];
    for (const f of files) {
      if (!f.endsWith('.json')) continue;
      try {
        metas.push(JSON.parse(await fs.readFile(path.join(inst.paths.backups, f), 'utf8')) as BackupMeta);
      } catch {
        // a metadata file being written right now
      }
    }
    return metas;
  }

  /** Where a backup's dump is (plain SQL that the engine's client replays). */
  backupFile(id: string, backupId: string): string {
    if (!INSTANCE_NAME.test(id) || !BACKUP_ID_PATTERN.test(backupId)) throw new BackendGoneError(BACKEND, `backup ${backupId}`);
    return path.join(instancePaths(this.root, id).backups, `${backupId}.sql`);
  }

  private async backupOf(inst: Instance, meta: BackupMeta): Promise<DbBackup> {
    const final = path.join(inst.paths.backups, `${meta.id}.sql`);
    const createdAt = new Date(meta.createdAt);
    try {
      const { size } = await fs.stat(final);
      return { id: meta.id, status: 'completed', sizeBytes: size, createdAt };
    } catch {
      const running = meta.pid !== null && (await processAlive(meta.pid, backupMarker(meta.id)));
      return { id: meta.id, status: running ? 'running' : 'failed', sizeBytes: null, createdAt };
    }
  }

  async startBackup(id: string, key: string): Promise<DbBackup> {
    const { inst, driver } = await this.answering(id);
    return withFileLock(path.join(inst.paths.dir, '.backup.lock'), async () => {
      const earlier = (await this.backupMetas(inst)).find((m) => m.key === key);
      if (earlier) return this.backupOf(inst, earlier);
      const now = new Date();
      const backupId = `${now
        .toISOString()
        .replace(/[-:]/g, '')
        .replace(/\.\d+Z$/, 'Z')}-${randomBytes(3).toString('hex')}`;
      const dump = await driver.dumpCommand(inst);
      const file = (ext: string) => path.join(inst.paths.backups, `${backupId}${ext}`);
      const pid = await spawnDetached('/bin/sh', ['-c', DUMP_SCRIPT, backupMarker(backupId), dump.command, ...dump.args], {
        as: await driver.account(),
        cwd: inst.paths.backups,
        env: { PATH: process.env.PATH, LANG: 'C.UTF-8', DUMP_PARTIAL: file('.sql.partial'), DUMP_FINAL: file('.sql'), DUMP_ERRORS: file('.err') },
      }).catch((err) => unavailable(new CommandError('sh', null, (err as Error).message), id));
      const meta: BackupMeta = { id: backupId, key, createdAt: now.toISOString(), pid };
      await fs.writeFile(file('.json'), `${JSON.stringify(meta)}\n`, { mode: 0o644 });
      return this.backupOf(inst, meta);
    });
  }

  async listBackups(id: string): Promise<DbBackup[]> {
    const { inst } = await this.load(id);
    const backups = await Promise.all((await this.backupMetas(inst)).map((m) => this.backupOf(inst, m)));
    return backups.sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1));
  }
}
