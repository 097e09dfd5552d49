/**
 * The real DBaaS backend: every instance is its own PostgreSQL or MariaDB server process on this
 * machine, with its own OS account, data directory, loopback address and port, private control
 * socket and TLS certificate (layout in engine.ts). The account keeps tenants apart on the
 * machine: whatever code a customer gets to run inside their server runs as that account, which
 * can read or write nothing of any other instance. Servers run detached, so they outlive the API
 * and worker processes; any process finds them again through their pidfiles (`resumeInstances`
 * starts the ones that should run, e.g. after a reboot). Lifecycle changes take a lock file per
 * instance, shared by the API and the worker.
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
import { hostAddress, hostCount, parseIpv4Range, type Ipv4Range } from '../../common/ipv4-range';
import { accountNameFor, ensureAccount, isolatedAccounts, removeAccount } from '../os-accounts';
import { instanceAddress, instancePaths, instanceUnavailable, type EngineDriver, type Instance, type InstancePaths, type InstanceRecord } from './engine';
import { MariaDbEngine } from './mariadb.engine';
import { PostgresEngine } from './postgresql.engine';
import {
  CommandError,
  exists,
  freeLoopbackPort,
  killProcessesOf,
  processAlive,
  runningAsRoot,
  spawnDetached,
  tailLines,
  withFileLock,
  type Account,
} from './system';
import { ensureReachable, makeDirectory, readTenantFile, run, streamOutput, TenantFileError } from '../local-server';
import { ensureCertificateAuthority, issueServerCertificate, readCaCertificate } from './tls';

const BACKEND = 'dbaas';
/** Instance names become directory names. */
const INSTANCE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** `20261123T101500Z-3f9a1c`: sorts by time, safe as a file name and in a URL. */
export const BACKUP_ID_PATTERN = /^\d{8}T\d{6}Z-[0-9a-f]{6}$/;
export const DEFAULT_ADDRESS_RANGE = '127.78.0.0/16';
/** In a new instance's directory until its record is written: the address it took (see reserveAddress). */
const ADDRESS_RESERVATION = '.address';

export interface DbInstancesOptions {
  /** Where instances live: `.data/dbaas` for `npm start`, a temporary directory in tests. */
  rootDir: string;
  /**
   * The loopback range instances listen in (DBAAS_ADDRESS_RANGE): each new instance gets the lowest
   * address no other instance under `rootDir` has, and a certificate for that address alone.
   */
  addressRange?: string;
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
  if (err instanceof CommandError) throw instanceUnavailable(BACKEND, instance, err.message);
  throw err;
}

export class DbInstancesAdapter implements DbaasProvider {
  readonly pollIntervalMs: number;
  private readonly addresses: Ipv4Range;
  private readonly root: string;
  private enginesCache: Record<DbEngine, EngineDriver> | null = null;

  constructor(private readonly opts: DbInstancesOptions) {
    this.root = path.resolve(opts.rootDir);
    const range = parseIpv4Range(opts.addressRange ?? DEFAULT_ADDRESS_RANGE);
    if (!range) throw new Error(`DBAAS_ADDRESS_RANGE: ${opts.addressRange} is not an IPv4 range such as ${DEFAULT_ADDRESS_RANGE}`);
    this.addresses = range;
    this.pollIntervalMs = opts.pollIntervalMs ?? 500;
  }

  /** Engines are made on first use: looking up binaries must not fail a process that never uses them. */
  private get engines(): Record<DbEngine, EngineDriver> {
    this.enginesCache ??= { postgresql: new PostgresEngine(this.opts.postgresBinDir), mysql: new MariaDbEngine() };
    return this.enginesCache;
  }

  private async ensureRoot(): Promise<void> {
    // Traversable (not listable) by the servers' accounts, which own their instance directories.
    await makeDirectory(path.join(this.root, 'instances'), 0o711);
    await fs.chmod(this.root, 0o711);
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
    // The servers run as the record's account: only ever the instance's own (an instance from
    // before, whose directory its server's account may write, could otherwise name `root`).
    if (rec.account !== undefined && rec.account !== this.accountName(id))
      throw new BackendUnavailableError(BACKEND, `instance ${id}: its record names account "${rec.account}", not its own`);
    return { inst: { rec, paths }, driver: this.engines[rec.engine] };
  }

  /** The OS account of instance `name` (the same in every process, derived from root and name). */
  private accountName(name: string): string {
    return accountNameFor('db', this.root, name);
  }

  /**
   * Takes the lowest address of the range that no other instance under the root has (in its record,
   * or reserved by a creation still under way) and reserves it in the new instance's directory.
   * One process at a time, so two creations never take the same address.
   */
  private async reserveAddress(paths: InstancePaths): Promise<string> {
    const instances = path.join(this.root, 'instances');
    return withFileLock(path.join(instances, '.addresses.lock'), async () => {
      const taken = new Set<string>();
      for (const e of await fs.readdir(instances, { withFileTypes: true })) {
        if (!e.isDirectory() || !INSTANCE_NAME.test(e.name) || e.name === path.basename(paths.dir)) continue;
        const other = instancePaths(this.root, e.name);
        const address =
          (await this.readRecord(other))?.address ?? (await fs.readFile(path.join(other.dir, ADDRESS_RESERVATION), 'utf8').catch(() => '')).trim();
        if (address) taken.add(address);
      }
      for (let i = 0; i < hostCount(this.addresses); i++) {
        const address = hostAddress(this.addresses, i) as string;
        if (taken.has(address)) continue;
        await fs.writeFile(path.join(paths.dir, ADDRESS_RESERVATION), address, { mode: 0o600 });
        return address;
      }
      throw new BackendUnavailableError(BACKEND, `no free address left in DBAAS_ADDRESS_RANGE (${taken.size} instances)`);
    });
  }

  /**
   * The new instance's directory: root's, entered only by root and the instance's account (its
   * group), which owns the subdirectories the engine makes in it. Without root, this process's.
   */
  private async makeInstanceDir(paths: InstancePaths, account: Account): Promise<void> {
    await fs.mkdir(paths.dir, { mode: 0o710 });
    await fs.chmod(paths.dir, 0o710);
    if (runningAsRoot()) await fs.chown(paths.dir, 0, account.gid);
  }

  /**
   * Ends whatever still runs as the instance's own account (a dump, a server that would not stop)
   * and removes the account. Never touches an engine's shared account (instances from before).
   */
  private async dropAccount(name: string): Promise<void> {
    if (!isolatedAccounts()) return;
    await killProcessesOf(this.accountName(name));
    await removeAccount(this.accountName(name));
  }

  /** The instance, which must be answering: a server that is down or starting is unavailable. */
  private async answering(id: string): Promise<{ inst: Instance; driver: EngineDriver }> {
    const loaded = await this.load(id);
    if (!(await loaded.driver.isRunning(loaded.inst))) throw instanceUnavailable(BACKEND, id, 'not running');
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
        try {
          // Its own account (without root: this process's), recorded so every process uses the same.
          const account = await ensureAccount(this.accountName(spec.name), { purpose: `DBaaS instance ${spec.name}`, dataDir: paths.dir });
          await this.makeInstanceDir(paths, account);
          // Said plainly before initdb or mariadb-install-db would fail on it with some unrelated line.
          try {
            ensureReachable(paths.dir, account, { server: `DBaaS instance ${spec.name}`, setting: 'DBAAS_DATA_DIR' });
          } catch (err) {
            throw new BackendUnavailableError(BACKEND, (err as Error).message);
          }
          const address = await this.reserveAddress(paths);
          rec = {
            name: spec.name,
            engine: spec.engine,
            serviceId: spec.serviceId,
            ...(isolatedAccounts() ? { account: account.name } : {}),
            address,
            port: await freeLoopbackPort(address),
            adminUsername: spec.adminUsername,
            createdAt: new Date().toISOString(),
            desired: 'running',
          };
          // Its own address only: with verify-full, no other instance passes for this one.
          const tls = await issueServerCertificate(ca, paths.tls, { commonName: spec.name, ips: [address], dnsNames: [], owner: account });
          await driver.initialize({ rec, paths }, tls);
          await this.writeRecord(paths, rec);
          await fs.rm(path.join(paths.dir, ADDRESS_RESERVATION), { force: true });
        } catch (err) {
          await this.dropAccount(spec.name).catch(() => undefined);
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

  // ---- moving to another host (docs/hosts.md "Moving") -------------------------------------------

  /**
   * The instance's files as a tar stream (`data/`, `backups/`) into `sink`, read as its own account
   * with its server stopped and marked to stay stopped, all under the instance's lock (no keeper or
   * call starts it while it is copied). The copy is of files, not SQL: nothing of the tenant's runs
   * anywhere while it moves, and the new host's server of the same engine version opens them as they
   * were (roles, passwords, rows, backups). Returns the bytes copied.
   */
  async exportFiles(id: string, sink: (chunk: Buffer) => Promise<void>): Promise<number> {
    const { inst, driver } = await this.load(id);
    return withFileLock(inst.paths.lock, async () => {
      await this.setDesired(inst, 'stopped');
      await driver.stop(inst).catch((err) => unavailable(err, id));
      const account = await driver.account(inst);
      let bytes = 0;
      // `cwd`, not `-C`: the account may pass through its instance's directory but not open it.
      const tar = streamOutput('tar', ['-cf', '-', '--', 'data', 'backups'], { as: account, cwd: inst.paths.dir, env: { PATH: process.env.PATH, LANG: 'C' } });
      for await (const chunk of tar) {
        await sink(chunk);
        bytes += chunk.length;
      }
      return bytes;
    });
  }

  /**
   * Replaces this instance's data and backups with another instance's files (a stream of
   * `exportFiles`), keeping the files of its data directory that belong to this host (its
   * configuration); extracted as its own account, so nothing in the archive reaches outside its
   * directories. The server stays stopped: `createInstance` of the same name starts it and resets
   * the admin's password and the platform's accounts.
   */
  async importFiles(id: string, archive: AsyncIterable<Buffer>): Promise<void> {
    const { inst, driver } = await this.load(id);
    await withFileLock(inst.paths.lock, async () => {
      await this.setDesired(inst, 'stopped');
      await driver.stop(inst).catch((err) => unavailable(err, id));
      for (const entry of await fs.readdir(inst.paths.data)) {
        if (!driver.hostFilesOfData.includes(entry)) await fs.rm(path.join(inst.paths.data, entry), { recursive: true, force: true });
      }
      for (const entry of await fs.readdir(inst.paths.backups)) await fs.rm(path.join(inst.paths.backups, entry), { recursive: true, force: true });
      const exclude = driver.hostFilesOfData.map((file) => `--exclude=data/${file}`);
      await run('tar', ['-xf', '-', '--no-same-owner', '--no-overwrite-dir', ...exclude], {
        as: await driver.account(inst),
        cwd: inst.paths.dir,
        env: { PATH: process.env.PATH, LANG: 'C' },
        input: archive,
        timeoutMs: 6 * 3_600_000,
      }).catch((err) => {
        if (err instanceof CommandError) throw new BackendRefusedError(BACKEND, `The instance's files could not be unpacked: ${err.detail}`, 'import_failed');
        throw err;
      });
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
        // An instance with its own account: dropAccount ends its dumps with everything else it runs.
        if (!rec.account) {
          for (const meta of await this.backupMetas(inst)) {
            // Only the dump's own shell, running as the instance's account (the metadata is the account's to write).
            const uid = (await this.engines[rec.engine].account(inst)).uid;
            if (meta.pid && (await processAlive(meta.pid, backupMarker(meta.id), { uid }))) process.kill(meta.pid, 'SIGTERM');
          }
        }
      }
      // Nothing of it runs any more when its files go; the account goes last (a uid freed before
      // its files would be handed to the next account made).
      if (isolatedAccounts()) await killProcessesOf(this.accountName(id));
      await fs.rm(paths.dir, { recursive: true, force: true });
      await this.dropAccount(id);
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
        // Under the lock, from the record as it is then: one stopped meanwhile (a move's copy) stays stopped.
        const paths = instancePaths(this.root, name);
        const resumed = await withFileLock(paths.lock, async () => {
          const { inst, driver } = await this.load(name);
          if (inst.rec.desired !== 'running' || (await driver.isRunning(inst))) return false;
          await driver.start(inst).catch((err) => unavailable(err, name));
          return true;
        });
        if (resumed) started.push(name);
      } catch (err) {
        failed.push({ name, error: (err as Error).message });
      }
    }
    return { started, failed };
  }

  /**
   * Stops every instance's server, keeping what each should be doing (`desired`): the end of a local
   * run (scripts/dev.ts), whose next start resumes them through the seed and the keeper. Not part of
   * DbaasProvider: in production instances outlive the control plane.
   */
  async stopServers(): Promise<void> {
    for (const name of await this.instanceNames()) {
      const { inst, driver } = await this.load(name);
      await withFileLock(inst.paths.lock, () => driver.stop(inst));
    }
  }

  /** Names of the instances on this machine. */
  async instanceNames(): Promise<string[]> {
    const entries = await fs.readdir(path.join(this.root, 'instances'), { withFileTypes: true }).catch(() => []);
    const names: string[] = [];
    for (const e of entries) if (e.isDirectory() && INSTANCE_NAME.test(e.name) && (await exists(instancePaths(this.root, e.name).record))) names.push(e.name);
    return names.sort();
  }

  /**
   * The ports the instances on this machine listen on (from their records, so an instance counts
   * from the moment it has a port, before it ever answered). Load-balancer backends may not reach
   * them (providers/lb.targets.ts). A record that cannot be read throws: the caller must not take
   * "no port" for an answer.
   */
  async listeningPorts(): Promise<number[]> {
    const ports: number[] = [];
    for (const name of await this.instanceNames()) {
      let text: string;
      try {
        text = await fs.readFile(instancePaths(this.root, name).record, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // destroyed meanwhile
        throw err;
      }
      const rec = JSON.parse(text) as InstanceRecord;
      if (Number.isInteger(rec.port)) ports.push(rec.port);
    }
    return ports;
  }

  // ---- reads -----------------------------------------------------------------------------------

  private async statusOf(inst: Instance, driver: EngineDriver): Promise<DbInstanceStatus> {
    const vitals = await driver.vitals(inst);
    return {
      id: inst.rec.name,
      engine: inst.rec.engine,
      state: 'running',
      version: vitals.version,
      host: instanceAddress(inst.rec),
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
      host: instanceAddress(inst.rec),
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
    const tail = await tailLines(file, (ls) => driver.parseLog(ls).length > lines).catch((err: unknown) => {
      // The server's account replaced its log with a link, a FIFO or a hard link (never followed,
      // never waited on): nothing to show.
      if (err instanceof TenantFileError) return null;
      throw err;
    });
    if (!tail) return [];
    const raw = tail.lines;
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
        // The backups directory is the server account's: a tenant file (no link, FIFO or huge file),
        // and only metadata whose id is a backup id and names its own file counts (an id such as
        // `../../x` would make backupOf look at a file elsewhere).
        const meta = JSON.parse(await readTenantFile(path.join(inst.paths.backups, f), 64 * 1024)) as BackupMeta;
        if (typeof meta.id !== 'string' || !BACKUP_ID_PATTERN.test(meta.id) || f !== `${meta.id}.json`) continue;
        if (meta.pid !== null && !Number.isInteger(meta.pid)) continue;
        metas.push(meta);
      } catch {
        // a metadata file being written right now, or not one of ours
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
    const completed = async (): Promise<DbBackup | null> => {
      // lstat: a link the server's account put there is not a dump (nor a way to learn another file's size).
      const stat = await fs.lstat(final).catch(() => null);
      return stat?.isFile() ? { id: meta.id, status: 'completed', sizeBytes: stat.size, createdAt } : null;
    };
    const done = await completed();
    if (done) return done;
    if (meta.pid !== null && (await processAlive(meta.pid, backupMarker(meta.id)))) return { id: meta.id, status: 'running', sizeBytes: null, createdAt };
    // The dump may have renamed its file and exited between the two looks above: look once more
    // before calling it failed (a terminal status a caller stops waiting on).
    return (await completed()) ?? { id: meta.id, status: 'failed', sizeBytes: null, createdAt };
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
        as: await driver.account(inst),
        cwd: inst.paths.backups,
        env: { PATH: process.env.PATH, LANG: 'C.UTF-8', DUMP_PARTIAL: file('.sql.partial'), DUMP_FINAL: file('.sql'), DUMP_ERRORS: file('.err') },
      }).catch((err) => unavailable(new CommandError('sh', null, (err as Error).message), id));
      const meta: BackupMeta = { id: backupId, key, createdAt: now.toISOString(), pid };
      // `wx`: never through a file or link the server's account put in its backups directory first.
      await fs.writeFile(file('.json'), `${JSON.stringify(meta)}\n`, { mode: 0o644, flag: 'wx' });
      return this.backupOf(inst, meta);
    });
  }

  async listBackups(id: string): Promise<DbBackup[]> {
    const { inst } = await this.load(id);
    const backups = await Promise.all((await this.backupMetas(inst)).map((m) => this.backupOf(inst, m)));
    return backups.sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1));
  }
}
