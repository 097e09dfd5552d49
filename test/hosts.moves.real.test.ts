import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMove } from '../domain/hosts/move';
import { connectClient } from './dbaas.instances.support';
import { startTwoHosts, type Svc, type TwoHosts } from './hosts.support';
import { eventually } from './lb.support';

/**
 * Moving database instances between two host agents on one machine (test/hosts.support.ts), by
 * copying their files: a PostgreSQL and a MariaDB instance, with rows, users, passwords and backups;
 * then the operator's `npm run hosts` listing and evacuating a host.
 */
const execFileAsync = promisify(execFile);
const root = path.resolve(__dirname, '..');

let two: TwoHosts;
let stack: TwoHosts['stack'];
let h2: TwoHosts['h2'];
let dbD: Svc;

beforeAll(async () => {
  two = await startTwoHosts();
  ({ stack, h2 } = two);
  // A balancer (placed on h1) first, so that the PostgreSQL instance lands on h2; it gets a backup.
  await two.newBalancer('lb-moves');
  dbD = await two.newDatabase();
  const backup = await stack.http.post(`/v1/dbaas/${dbD.id}/backups`, { token: stack.owner.key });
  expect(backup.status, backup.text).toBe(202);
  await eventually(
    async () => (await stack.http.get(`/v1/operations/${backup.body.id}`, { token: stack.owner.key })).body,
    (op) => op.status === 'succeeded',
    30_000,
  );
});
afterAll(async () => {
  await two?.close();
});

const hosts = () => two.hosts();
const hostOf = (id: string) => two.hostOf(id);
const newDatabase = (product?: string) => two.newDatabase(product);
const lbDir = (host: 'h1' | 'h2') => two.lbDir(host);
const dbDir = (host: 'h1' | 'h2') => two.dbDir(host);

describe('moves between two host agents', () => {
  for (const engine of ['postgresql', 'mysql'] as const) {
    it(`moving a ${engine} instance carries its databases, rows and users (same passwords) to the other host, at a new address`, async () => {
      const svc = engine === 'postgresql' ? dbD : await newDatabase('dbaas-mysql-s');
      const token = stack.owner.key;
      const base = `/v1/dbaas/${svc.id}`;
      const from = await hostOf(svc.id);
      const to = from === 'h1' ? 'h2' : 'h1';
      const admin = (await stack.http.post(`${base}/credentials`, { token })).body.password as string;
      const user = await stack.http.post(`${base}/users`, { token, body: { username: 'mover', password: 'Moved-pass-123456' } });
      expect(user.status, user.text).toBe(201);
      expect((await stack.http.post(`${base}/databases`, { token, body: { name: 'moved' } })).status).toBe(201);
      const before = (await stack.http.get(`${base}/connection`, { token })).body;
      const session = await connectClient(engine, { host: before.host, port: before.port, ca: before.ca_certificate }, 'admin', admin, 'moved');
      await session.query('create table t (n int)');
      await session.query('insert into t values (1), (2), (3)');
      await session.close();

      const started = await startMove({ db: stack.db, temporal: stack.api.deps.temporal, hosts: stack.api.deps.providers.hosts }, svc.serviceId, to);
      const result = await stack.temporal!.client.workflow.getHandle(started.workflowId).result();
      expect(result).toMatchObject({ from, to });
      expect(result.bytes).toBeGreaterThan(0);

      expect(await hostOf(svc.id)).toBe(to);
      const after = (await stack.http.get(`${base}/connection`, { token })).body;
      const range = (to === 'h1' ? stack.config.DBAAS_ADDRESS_RANGE : h2.config.DBAAS_ADDRESS_RANGE).split('.').slice(0, 3);
      expect(after.host.split('.').slice(0, 3)).toEqual(range);
      const moved = await connectClient(engine, { host: after.host, port: after.port, ca: after.ca_certificate }, 'admin', admin, 'moved');
      expect((await moved.query('select count(*) as n from t')).map((r) => Number((r as { n: unknown }).n))).toEqual([3]);
      await moved.close();
      // Only the customer's users and the admin: no account of the old host's came along.
      const users = (await stack.http.get(`${base}/users`, { token })).body.data.map((u: { username: string }) => u.username).sort();
      expect(users).toEqual(['admin', 'mover']);
      const mover = await connectClient(
        engine,
        { host: after.host, port: after.port, ca: after.ca_certificate },
        'mover',
        'Moved-pass-123456',
        engine === 'postgresql' ? 'postgres' : undefined,
      );
      await mover.close();
      // The old copy is gone from the old host; the API serves the instance where it is now.
      expect((await dbDir(from as 'h1' | 'h2').instanceNames()).some((n) => n.startsWith(`svc-${svc.serviceId}-`))).toBe(false);
      expect((await dbDir(to).instanceNames()).some((n) => n.startsWith(`svc-${svc.serviceId}-`))).toBe(true);
      expect((await stack.http.get(`${base}/databases`, { token })).body.data.map((d: { name: string }) => d.name)).toContain('moved');
      // Its backups came along (the PostgreSQL one was backed up before the move).
      if (engine === 'postgresql') expect((await stack.http.get(`${base}/backups`, { token })).body.data.length).toBeGreaterThan(0);
      // Calls about it are taken again; a second move is refused while none runs only for a bad target.
      await expect(startMove({ db: stack.db, temporal: stack.api.deps.temporal, hosts: stack.api.deps.providers.hosts }, svc.serviceId, to)).rejects.toThrow(
        /already/,
      );
      expect(Number((await stack.db('host_transfers').count('* as n').first())!.n)).toBe(0);
    });
  }

  it('npm run hosts lists the hosts, and evacuates one: drained, then everything on it moved, one at a time', async () => {
    const hostsCommand = (...args: string[]) =>
      execFileAsync(path.join(root, 'node_modules/.bin/tsx'), [path.join(root, 'scripts/hosts.ts'), ...args], {
        cwd: root,
        env: {
          ...process.env,
          DATABASE_URL: stack.database.url,
          TEMPORAL_ADDRESS: stack.temporal!.address,
          TEMPORAL_NAMESPACE: stack.config.TEMPORAL_NAMESPACE,
          TEMPORAL_TASK_QUEUE: stack.taskQueue,
          LOG_LEVEL: 'silent',
        },
        timeout: 120_000,
      });
    // The moves above left h2 empty: a balancer goes there (the least loaded host).
    const onlyOnH2 = await two.newBalancer('lb-evacuated');
    expect(await hostOf(onlyOnH2.id)).toBe('h2');
    const listed = await hostsCommand();
    expect(listed.stdout).toMatch(/^h1 {2}up {2}serves /m);
    expect(listed.stdout).toMatch(/^h2 {2}up {2}serves /m);
    const onH2 = (await hosts()).data.find((h) => h.name === 'h2')!.resources;
    expect(onH2.length).toBeGreaterThan(0);

    const evacuated = await hostsCommand('evacuate', 'h2');
    expect(evacuated.stdout).toContain('h2 has nothing placed on it now');
    const after = (await hosts()).data;
    expect(after.find((h) => h.name === 'h2')).toMatchObject({ status: 'draining', resources: [] });
    for (const r of onH2) expect(after.find((h) => h.name === 'h1')!.resources).toContainEqual(r);
    expect(await lbDir('h2').balancerIds()).toEqual([]);
    expect(await dbDir('h2').instanceNames()).toEqual([]);
    await expect(hostsCommand('move', 'svc_1', 'nope')).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('no host nope') });
  });

  it('a crafted archive cannot write outside the instance it is unpacked into (extracted as the instance’s own account)', async () => {
    const svc = await newDatabase();
    const host = (await hostOf(svc.id)) as 'h1' | 'h2';
    const instance = (await stack.db('dbaas_instances').where({ service_id: svc.serviceId }).first()).instance as string;
    // Root's directory outside every instance, and an archive whose `data/escape` is a link to it,
    // followed by a member that would land in it through the link.
    const outside = mkdtempSync(path.join(tmpdir(), 'outside-'));
    chmodSync(outside, 0o755);
    const craft = mkdtempSync(path.join(tmpdir(), 'craft-'));
    mkdirSync(path.join(craft, 'a/data'), { recursive: true });
    symlinkSync(outside, path.join(craft, 'a/data/escape'));
    mkdirSync(path.join(craft, 'b/data/escape'), { recursive: true });
    writeFileSync(path.join(craft, 'b/data/escape/pwned'), 'written through a link\n');
    await execFileAsync('tar', ['-cf', path.join(craft, 'x.tar'), '-C', path.join(craft, 'a'), 'data/escape']);
    await execFileAsync('tar', ['-rf', path.join(craft, 'x.tar'), '-C', path.join(craft, 'b'), 'data/escape/pwned']);
    async function* archive() {
      yield readFileSync(path.join(craft, 'x.tar'));
    }
    await dbDir(host)
      .importFiles(instance, archive())
      .catch(() => undefined);
    expect(readdirSync(outside)).toEqual([]);
    rmSync(craft, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  });
});
