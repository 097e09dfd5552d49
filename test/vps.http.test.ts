import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from './helpers/stack';
import { createAccount, createApiKey, createService } from './helpers/fixtures';
import { ConsoleTicketSchema, VpsBackupSchema, VpsConfigSchema, VpsIpSchema, VpsMetricsSchema, VpsSchema, VpsTemplateSchema } from '../api/routes/vps/schemas';
import { OperationSchema } from '../api/schemas';
import { DEFAULT_CAPABILITIES } from '../domain/capabilities';
import { BACKUP_ID_PATTERN } from '../providers/hypervisor.provider';
import { seedOrders } from '../db/seeds/orders.seed';
import { createVps, setVpsBackend, simulator, waitForOperation, type TestVps } from './vps.support';

/**
 * The 14 VPS endpoints over HTTP against the real stack (PostgreSQL, Temporal dev server, worker,
 * hypervisor simulator at SIM_DELAY_SCALE 0.01). The workflows' own behaviour is in
 * vps.workflows.test.ts.
 */
let stack: Stack;
let qemu: TestVps;
let lxc: TestVps;
let token: string;

const enc = encodeURIComponent;

beforeAll(async () => {
  stack = await startStack();
  token = stack.owner.key;
  qemu = await createVps(stack, { type: 'qemu', node: 'hv-a', hostname: 'web-1.example.test' });
  lxc = await createVps(stack, { type: 'lxc', node: 'hv-b', hostname: 'ct-1.example.test' });
});
afterAll(() => stack?.close());

async function otherAccountVps(): Promise<TestVps> {
  const { accountId } = await createAccount(stack.db);
  return createVps(stack, { accountId });
}

async function makeBackup(vps: TestVps): Promise<string> {
  const res = await stack.http.post(`/v1/vps/${vps.id}/backups`, { token, body: {} });
  expect(res.status, res.text).toBe(202);
  const op = await waitForOperation(stack, res.body.id);
  expect(op.status, JSON.stringify(op)).toBe('succeeded');
  return op.result.backup_id;
}

describe('GET /v1/vps', () => {
  it("lists the account's VPS from the database with live fields null", async () => {
    const other = await otherAccountVps();
    const dns = await createService(stack.db, stack.owner.accountId, { family: 'dns' });
    const unprovisioned = await createService(stack.db, stack.owner.accountId, { family: 'vps' });
    const res = await stack.http.get('/v1/vps?limit=100', { token });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    const ids = res.body.data.map((v: any) => v.id);
    expect(ids).toEqual(expect.arrayContaining([qemu.id, lxc.id, unprovisioned.id]));
    expect(ids).not.toContain(other.id);
    expect(ids).not.toContain(dns.id);
    for (const item of res.body.data) {
      VpsSchema.parse(item);
      expect(item).toMatchObject({
        object: 'vps',
        state: null,
        os_hostname: null,
        uptime_seconds: null,
        cpu: null,
        memory: null,
        disk: null,
        reinstalling: false,
      });
    }
    const first = res.body.data.find((v: any) => v.id === qemu.id);
    expect(first).toMatchObject({ type: 'qemu', vmid: qemu.vmid, node: 'hv-a', hostname: 'web-1.example.test', status: 'active' });
    expect(first.primary_ip).toMatch(/^203\.0\.113\./);
    expect(first.capabilities).toEqual(DEFAULT_CAPABILITIES.vps);
    expect(res.body.data.find((v: any) => v.id === unprovisioned.id)).toMatchObject({ type: null, vmid: null, node: null });
  });

  it('pages with opaque cursors, newest first', async () => {
    const page1 = await stack.http.get('/v1/vps?limit=1', { token });
    expect(page1.body.data).toHaveLength(1);
    expect(page1.body.has_more).toBe(true);
    const page2 = await stack.http.get(`/v1/vps?limit=1&cursor=${enc(page1.body.next_cursor)}`, { token });
    expect(page2.status).toBe(200);
    expect(Number(page2.body.data[0].id.slice(4))).toBeLessThan(Number(page1.body.data[0].id.slice(4)));
    const bad = await stack.http.get('/v1/vps?cursor=nonsense', { token });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'cursor' });
  });

  it("shows only the services a key's allowlist lets it see", async () => {
    const narrow = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['vps:read'], allowlist: [lxc.serviceId] });
    const res = await stack.http.get('/v1/vps?limit=100', { token: narrow.token });
    expect(res.body.data.map((v: any) => v.id)).toEqual([lxc.id]);
    expect((await stack.http.get(`/v1/vps/${qemu.id}`, { token: narrow.token })).status).toBe(404);
  });
});

describe('GET /v1/vps/{id}', () => {
  it('reads the live state from the hypervisor', async () => {
    const res = await stack.http.get(`/v1/vps/${qemu.id}`, { token });
    expect(res.status).toBe(200);
    const vps = VpsSchema.parse(res.body);
    expect(vps).toMatchObject({
      id: qemu.id,
      type: 'qemu',
      vmid: qemu.vmid,
      node: 'hv-a',
      state: 'running',
      hostname: 'web-1.example.test',
      os_hostname: 'web-1.example.test',
      reinstalling: false,
    });
    expect(vps.uptime_seconds).toBeGreaterThanOrEqual(0);
    expect(vps.cpu).toMatchObject({ cores: 2 });
    expect(vps.cpu!.usage_percent).toBeGreaterThanOrEqual(0);
    expect(vps.memory!.total_bytes).toBe(2048 * 1024 ** 2);
    expect(vps.disk!.total_bytes).toBe(40 * 1024 ** 3);
    expect(vps.disk!.used_bytes).toBeGreaterThan(0);
    // The id is accepted without its prefix too.
    expect((await stack.http.get(`/v1/vps/${qemu.serviceId}`, { token })).body.id).toBe(qemu.id);
  });

  it('answers with null live fields when the hypervisor does not answer, and lists still work', async () => {
    await setVpsBackend(stack, true);
    try {
      const res = await stack.http.get(`/v1/vps/${lxc.id}`, { token });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        id: lxc.id,
        type: 'lxc',
        vmid: lxc.vmid,
        state: null,
        cpu: null,
        memory: null,
        disk: null,
        uptime_seconds: null,
        hostname: 'ct-1.example.test',
      });
      expect((await stack.http.get('/v1/vps', { token })).status).toBe(200);
      // Calls that cannot be answered without the hypervisor say so.
      const config = await stack.http.get(`/v1/vps/${lxc.id}/config`, { token });
      expect(config.status).toBe(503);
      expect(config.body.error).toMatchObject({ type: 'api_error', code: 'backend_unavailable' });
    } finally {
      await setVpsBackend(stack, false);
    }
  });

  it("is 404 for another account's VPS, a service of another family, and ids that cannot exist", async () => {
    const other = await otherAccountVps();
    const dns = await createService(stack.db, stack.owner.accountId, { family: 'dns' });
    for (const id of [other.id, dns.id, 'svc_999999', 'not-an-id']) {
      for (const [method, path, body] of [
        ['GET', `/v1/vps/${id}`, undefined],
        ['GET', `/v1/vps/${id}/config`, undefined],
        ['POST', `/v1/vps/${id}/power`, { action: 'stop' }],
        ['POST', `/v1/vps/${id}/backups`, {}],
        ['POST', `/v1/vps/${id}/console`, {}],
        ['GET', `/v1/vps/${id}/backups`, undefined],
      ] as const) {
        const res = await stack.http.request(method, path, { token, body });
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(res.body.error.code).toBe('not_found');
      }
    }
    // Nothing was done to the other account's machine, and no operation was written for it.
    expect((await simulator(stack).status(other.vmid)).state).toBe('running');
    expect(await stack.db('operations').whereIn('resource_id', [other.id, dns.id])).toHaveLength(0);
  });
});

describe("actions on another account's VPS", () => {
  it('are 404 without locking or waiting for its rows, even while that account holds them', async () => {
    const other = await otherAccountVps();
    const held = await stack.db.transaction();
    try {
      await held('services').where({ id: other.serviceId }).forUpdate().first();
      await held('vps_servers').where({ service_id: other.serviceId }).forUpdate().first();
      for (const [path, body] of [
        ['power', { action: 'stop' }],
        ['backups', {}],
      ] as const) {
        const res = await Promise.race([
          stack.http.post(`/v1/vps/${other.id}/${path}`, { token, body }),
          new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${path} waited for another account's row lock`)), 5_000)),
        ]);
        expect(res.status, path).toBe(404);
      }
    } finally {
      await held.rollback();
    }
    expect(await stack.db('operations').where({ resource_id: other.id })).toHaveLength(0);
  });
});

describe('GET /v1/vps/{id}/config, /ips, /templates, /metrics', () => {
  it('returns the hypervisor configuration', async () => {
    const q = await stack.http.get(`/v1/vps/${qemu.id}/config`, { token });
    expect(q.status).toBe(200);
    expect(VpsConfigSchema.parse(q.body)).toMatchObject({
      object: 'vps_config',
      vmid: qemu.vmid,
      node: 'hv-a',
      type: 'qemu',
      cores: 2,
      memory_mb: 2048,
      boot_disk: `local-lvm:vm-${qemu.vmid}-disk-0,size=40G`,
      os_type: 'l26',
      hostname: 'web-1.example.test',
    });
    const l = await stack.http.get(`/v1/vps/${lxc.id}/config`, { token });
    expect(l.body).toMatchObject({ type: 'lxc', boot_disk: `local-lvm:subvol-${lxc.vmid}-disk-0,size=10G`, os_type: 'debian' });
  });

  it('lists IPv4 and IPv6 addresses', async () => {
    const res = await stack.http.get(`/v1/vps/${qemu.id}/ips`, { token });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(2);
    res.body.data.forEach((ip: unknown) => VpsIpSchema.parse(ip));
    const [v4, v6] = res.body.data;
    expect(v4).toMatchObject({ object: 'vps_ip', version: 4, netmask: '255.255.255.0', gateway: '203.0.113.1', prefix: '24' });
    expect(v6).toMatchObject({ object: 'vps_ip', version: 6, netmask: null, gateway: '2001:db8:100::1', prefix: '64' });
    const vps = await stack.http.get(`/v1/vps/${qemu.id}`, { token });
    expect(v4.address).toBe(vps.body.primary_ip);
    const paged = await stack.http.get(`/v1/vps/${qemu.id}/ips?limit=1`, { token });
    expect(paged.body).toMatchObject({ has_more: true });
    const rest = await stack.http.get(`/v1/vps/${qemu.id}/ips?limit=1&cursor=${enc(paged.body.next_cursor)}`, { token });
    expect(rest.body.data.map((ip: any) => ip.version)).toEqual([6]);
    expect(rest.body.has_more).toBe(false);
  });

  it('lists templates by machine type and node', async () => {
    const q = await stack.http.get(`/v1/vps/${qemu.id}/templates?limit=100`, { token });
    expect(q.status).toBe(200);
    q.body.data.forEach((t: unknown) => VpsTemplateSchema.parse(t));
    expect(q.body.data.every((t: any) => t.type === 'qemu')).toBe(true);
    expect(q.body.data.map((t: any) => t.id)).toContain('local:import/rocky-9-genericcloud-amd64.qcow2');
    const l = await stack.http.get(`/v1/vps/${lxc.id}/templates?limit=100`, { token });
    expect(l.body.data.every((t: any) => t.type === 'lxc')).toBe(true);
    expect(l.body.data.map((t: any) => t.id)).toContain('local:vztmpl/alpine-3.20-default_20240908_amd64.tar.xz');
    // The same type on the other node has other templates.
    const qemuB = await createVps(stack, { type: 'qemu', node: 'hv-b' });
    const qb = await stack.http.get(`/v1/vps/${qemuB.id}/templates?limit=100`, { token });
    expect(qb.body.data.map((t: any) => t.id)).not.toContain('local:import/rocky-9-genericcloud-amd64.qcow2');
    expect(qb.body.data.length).toBeGreaterThan(0);
  });

  it('returns metrics whose resolution follows the timeframe (default hour)', async () => {
    const expected = { hour: [60, 60_000], day: [48, 1_800_000], week: [56, 10_800_000], month: [60, 43_200_000], year: [52, 604_800_000] } as const;
    const byDefault = await stack.http.get(`/v1/vps/${qemu.id}/metrics`, { token });
    expect(byDefault.status).toBe(200);
    expect(byDefault.body.timeframe).toBe('hour');
    for (const [timeframe, [points, stepMs]] of Object.entries(expected)) {
      const res = await stack.http.get(`/v1/vps/${qemu.id}/metrics?timeframe=${timeframe}`, { token });
      expect(res.status).toBe(200);
      const metrics = VpsMetricsSchema.parse(res.body);
      expect(metrics).toMatchObject({ object: 'vps_metrics', timeframe });
      expect(metrics.data).toHaveLength(points);
      const times = metrics.data.map((p) => Date.parse(p.time));
      for (let i = 1; i < times.length; i++) expect(times[i] - times[i - 1]).toBe(stepMs);
      for (const p of metrics.data) {
        expect(p.cpu_percent).toBeGreaterThanOrEqual(0);
        expect(p.cpu_percent).toBeLessThanOrEqual(100);
        expect(p.memory_bytes).toBeLessThanOrEqual(2048 * 1024 ** 2);
      }
    }
    const bad = await stack.http.get(`/v1/vps/${qemu.id}/metrics?timeframe=decade`, { token });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'timeframe' });
  });
});

describe('PATCH /v1/vps/{id}', () => {
  it('renames an lxc container immediately', async () => {
    const res = await stack.http.patch(`/v1/vps/${lxc.id}`, { token, body: { hostname: 'ct-renamed.example.test' } });
    expect(res.status, res.text).toBe(200);
    expect(VpsSchema.parse(res.body)).toMatchObject({ hostname: 'ct-renamed.example.test', os_hostname: 'ct-renamed.example.test' });
    expect((await stack.http.get(`/v1/vps/${lxc.id}/config`, { token })).body.hostname).toBe('ct-renamed.example.test');
    const list = await stack.http.get('/v1/vps?limit=100', { token });
    expect(list.body.data.find((v: any) => v.id === lxc.id).hostname).toBe('ct-renamed.example.test');
  });

  it('renames a qemu VM now; the guest OS takes the name at its next reboot', async () => {
    const vps = await createVps(stack, { type: 'qemu', hostname: 'old.example.test' });
    const res = await stack.http.patch(`/v1/vps/${vps.id}`, { token, body: { hostname: 'new.example.test' } });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ hostname: 'new.example.test', os_hostname: 'old.example.test', state: 'running' });
    const reboot = await stack.http.post(`/v1/vps/${vps.id}/power`, { token, body: { action: 'reboot' } });
    expect(reboot.status).toBe(202);
    expect((await waitForOperation(stack, reboot.body.id)).status).toBe('succeeded');
    const after = await stack.http.get(`/v1/vps/${vps.id}`, { token });
    expect(after.body).toMatchObject({ hostname: 'new.example.test', os_hostname: 'new.example.test', state: 'running' });
  });

  it('refuses a bad hostname with validation_failed', async () => {
    for (const hostname of ['-bad-.example', 'a'.repeat(64) + '.example', 'under_score', '']) {
      const res = await stack.http.patch(`/v1/vps/${lxc.id}`, { token, body: { hostname } });
      expect(res.status, hostname).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'hostname' });
    }
    const extra = await stack.http.patch(`/v1/vps/${lxc.id}`, { token, body: { hostname: 'ok.example', cores: 64 } });
    expect(extra.status).toBe(400);
  });
});

describe('POST /v1/vps/{id}/console', () => {
  it('returns a single-use VNC ticket, never cached nor replayed', async () => {
    const key = randomUUID();
    const first = await stack.http.post(`/v1/vps/${qemu.id}/console`, { token, body: {}, headers: { 'idempotency-key': key } });
    expect(first.status, first.text).toBe(201);
    expect(ConsoleTicketSchema.parse(first.body)).toMatchObject({ object: 'console_ticket', type: 'vnc', file: null });
    expect(first.headers.get('cache-control')).toBe('no-store');
    const url = new URL(first.body.url);
    expect(url.searchParams.get('vmid')).toBe(String(qemu.vmid));
    expect(url.searchParams.get('console')).toBe('kvm');
    const ticket = url.searchParams.get('vncticket')!;

    const second = await stack.http.post(`/v1/vps/${qemu.id}/console`, { token, body: {}, headers: { 'idempotency-key': key } });
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(second.body.url).not.toBe(first.body.url);

    expect(await simulator(stack).redeemConsoleTicket(qemu.vmid, ticket)).toBe(true);
    expect(await simulator(stack).redeemConsoleTicket(qemu.vmid, ticket)).toBe(false);

    await stack.api.deps.audit.flush();
    const audit = JSON.stringify(await stack.db('audit_logs').where({ route: '/v1/vps/:id/console' }));
    expect(audit).toContain('/console');
    expect(audit).not.toContain(ticket);
    expect(JSON.stringify(await stack.db('idempotency_keys').select('*'))).not.toContain(ticket);
  });

  it('returns a SPICE file with the password for qemu, and refuses SPICE on lxc', async () => {
    const res = await stack.http.post(`/v1/vps/${qemu.id}/console`, { token, body: { type: 'spice' } });
    expect(res.status, res.text).toBe(201);
    expect(res.body).toMatchObject({ type: 'spice', url: null });
    expect(res.body.file).toMatch(/^\[virt-viewer\]\ntype=spice\n/);
    const password = /password=(\S+)/.exec(res.body.file)![1];
    expect(await simulator(stack).redeemConsoleTicket(qemu.vmid, password)).toBe(true);
    expect(await simulator(stack).redeemConsoleTicket(qemu.vmid, password)).toBe(false);
    await stack.api.deps.audit.flush();
    expect(JSON.stringify(await stack.db('audit_logs').select('*'))).not.toContain(password);

    const lxcSpice = await stack.http.post(`/v1/vps/${lxc.id}/console`, { token, body: { type: 'spice' } });
    expect(lxcSpice.status).toBe(400);
    expect(lxcSpice.body.error.code).toBe('unsupported_for_product');
    const lxcVnc = await stack.http.post(`/v1/vps/${lxc.id}/console`, { token });
    expect(lxcVnc.status).toBe(201);
    expect(new URL(lxcVnc.body.url).searchParams.get('console')).toBe('lxc');
  });

  it('needs the vps:console scope', async () => {
    const key = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['vps:read', 'vps:write', 'vps:power'] });
    const res = await stack.http.post(`/v1/vps/${qemu.id}/console`, { token: key.token, body: {} });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'vps:console' });
  });
});

describe('scopes and capabilities', () => {
  it('asks for the scope each action needs', async () => {
    const readOnly = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['vps:read'] });
    const cases = [
      ['POST', `/v1/vps/${qemu.id}/power`, { action: 'start' }, 'vps:power'],
      ['POST', `/v1/vps/${qemu.id}/reinstall`, { template: 'x', root_password: 'long enough pw' }, 'vps:write'],
      ['PATCH', `/v1/vps/${qemu.id}`, { hostname: 'x.example' }, 'vps:write'],
      ['POST', `/v1/vps/${qemu.id}/backups`, {}, 'vps:write'],
      ['DELETE', `/v1/vps/${qemu.id}/backups/${enc('local:backup/vzdump-qemu-1-2026_01_01-00_00_00.vma.zst')}`, undefined, 'vps:write'],
    ] as const;
    for (const [method, path, body, scope] of cases) {
      const res = await stack.http.request(method, path, { token: readOnly.token, body });
      expect(res.status, path).toBe(403);
      expect(res.body.error.required_scope).toBe(scope);
    }
    const powerOnly = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['vps:power'] });
    expect((await stack.http.get(`/v1/vps/${qemu.id}`, { token: powerOnly.token })).body.error.required_scope).toBe('vps:read');
  });

  it('answers 400 unsupported_for_product for every capability that is false', async () => {
    const none = Object.fromEntries(Object.keys(DEFAULT_CAPABILITIES.vps).map((k) => [k, false]));
    const vps = await createVps(stack, { capabilities: none });
    const backupId = enc(`local:backup/vzdump-qemu-${vps.vmid}-2026_01_01-00_00_00.vma.zst`);
    const cases = [
      ['POST', `/v1/vps/${vps.id}/power`, { action: 'start' }],
      ['POST', `/v1/vps/${vps.id}/reinstall`, { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'long enough pw' }],
      ['PATCH', `/v1/vps/${vps.id}`, { hostname: 'x.example' }],
      ['POST', `/v1/vps/${vps.id}/console`, {}],
      ['GET', `/v1/vps/${vps.id}/templates`, undefined],
      ['GET', `/v1/vps/${vps.id}/metrics`, undefined],
      ['GET', `/v1/vps/${vps.id}/backups`, undefined],
      ['POST', `/v1/vps/${vps.id}/backups`, {}],
      ['DELETE', `/v1/vps/${vps.id}/backups/${backupId}`, undefined],
      ['POST', `/v1/vps/${vps.id}/backups/${backupId}/restore`, undefined],
    ] as const;
    for (const [method, path, body] of cases) {
      const res = await stack.http.request(method, path, { token, body });
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'unsupported_for_product' });
    }
    // Reads that need no capability still work, and the map is shown on the resource.
    const get = await stack.http.get(`/v1/vps/${vps.id}`, { token });
    expect(get.body.capabilities).toEqual(none);
    expect((await stack.http.get(`/v1/vps/${vps.id}/config`, { token })).status).toBe(200);
    expect(await stack.db('operations').where({ resource_id: vps.id })).toHaveLength(0);
  });

  it('answers 409 for actions on a VPS that has no machine yet, until one is built', async () => {
    const svc = await createService(stack.db, stack.owner.accountId, { family: 'vps' });
    const get = await stack.http.get(`/v1/vps/${svc.id}`, { token });
    expect(get.status).toBe(200);
    expect(get.body).toMatchObject({ type: null, vmid: null, state: null });
    for (const [path, body] of [
      ['power', { action: 'start' }],
      ['backups', {}],
    ] as const) {
      const res = await stack.http.post(`/v1/vps/${svc.id}/${path}`, { token, body });
      expect(res.status, path).toBe(409);
      expect(res.body.error).toMatchObject({ code: 'conflict', message: expect.stringContaining('no machine on the hypervisor yet') });
    }
    expect(await stack.db('operations').where({ resource_id: svc.id })).toHaveLength(0);

    const built = await stack.http.post(`/_dev/vps/${svc.id}/machine`, { body: { type: 'lxc' } });
    expect(built.status, built.text).toBe(200);
    const again = await stack.http.post(`/_dev/vps/${svc.id}/machine`, { body: { type: 'qemu' } });
    expect(again.body.vmid).toBe(built.body.vmid);
    const after = await stack.http.get(`/v1/vps/${svc.id}`, { token });
    expect(after.body).toMatchObject({ type: 'lxc', vmid: built.body.vmid, state: 'running' });
    expect(
      (await stack.http.post(`/_dev/vps/${(await createService(stack.db, stack.owner.accountId, { family: 'dns' })).id}/machine`, { body: {} })).status,
    ).toBe(404);
  });
});

describe('validation', () => {
  it('refuses bad power and reinstall bodies with the field in error', async () => {
    const cases = [
      [`/v1/vps/${qemu.id}/power`, { action: 'hibernate' }, 'action'],
      [`/v1/vps/${qemu.id}/power`, {}, 'action'],
      [`/v1/vps/${qemu.id}/reinstall`, { template: 'local:import/debian-12-genericcloud-amd64.qcow2' }, 'root_password'],
      [`/v1/vps/${qemu.id}/reinstall`, { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'short' }, 'root_password'],
      [`/v1/vps/${qemu.id}/reinstall`, { template: 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst', root_password: 'long enough pw' }, 'template'],
      [`/v1/vps/${qemu.id}/backups`, { mode: 'hot' }, 'mode'],
    ] as const;
    for (const [path, body, param] of cases) {
      const res = await stack.http.post(path, { token, body });
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
    }
    const short = await stack.http.post(`/v1/vps/${qemu.id}/reinstall`, { token, body: { template: 'x', root_password: 'sEcr3t!' } });
    expect(short.text).not.toContain('sEcr3t!');
    const json = await stack.http.post(`/v1/vps/${qemu.id}/power`, { token, rawBody: '{"action":', headers: { 'content-type': 'application/json' } });
    expect(json.status).toBe(400);
    expect(json.body.error.code).toBe('invalid_json');
  });
});

describe('backups', () => {
  it('creates a backup through an operation, lists it, and deletes it by its URL-encoded id', async () => {
    const res = await stack.http.post(`/v1/vps/${qemu.id}/backups`, { token, body: { mode: 'snapshot' } });
    expect(res.status, res.text).toBe(202);
    expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
    expect(OperationSchema.parse(res.body)).toMatchObject({ type: 'vps.backup', resource: { object: 'vps', id: qemu.id } });
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', progress: 100, result: { mode: 'snapshot' } });
    const backupId: string = op.result.backup_id;
    expect(backupId).toMatch(BACKUP_ID_PATTERN);
    expect(backupId).toMatch(new RegExp(`^local:backup/vzdump-qemu-${qemu.vmid}-\\d{4}_\\d{2}_\\d{2}-\\d{2}_\\d{2}_\\d{2}\\.vma\\.zst$`));
    expect(op.result.size_bytes).toBeGreaterThan(0);

    const list = await stack.http.get(`/v1/vps/${qemu.id}/backups`, { token });
    expect(list.status).toBe(200);
    list.body.data.forEach((b: unknown) => VpsBackupSchema.parse(b));
    expect(list.body.data[0]).toMatchObject({ object: 'vps_backup', id: backupId, storage: 'local', mode: 'snapshot', size_bytes: op.result.size_bytes });

    // The path segment carries ':' and '/' encoded; Express decodes it back to the id.
    const path = `/v1/vps/${qemu.id}/backups/${enc(backupId)}`;
    expect(path).toContain('local%3Abackup%2Fvzdump-qemu-');
    const del = await stack.http.delete(path, { token });
    expect(del.status, del.text).toBe(204);
    const after = await stack.http.get(`/v1/vps/${qemu.id}/backups`, { token });
    expect(after.body.data.map((b: any) => b.id)).not.toContain(backupId);
    const again = await stack.http.delete(path, { token });
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
  });

  it('pages the backup list newest first', async () => {
    const a = await makeBackup(lxc);
    const b = await makeBackup(lxc);
    expect(a).not.toBe(b);
    expect(a).toMatch(/\.tar\.zst$/);
    const page1 = await stack.http.get(`/v1/vps/${lxc.id}/backups?limit=1`, { token });
    expect(page1.body).toMatchObject({ has_more: true });
    expect(page1.body.data.map((x: any) => x.id)).toEqual([b]);
    const page2 = await stack.http.get(`/v1/vps/${lxc.id}/backups?limit=1&cursor=${enc(page1.body.next_cursor)}`, { token });
    expect(page2.body.data.map((x: any) => x.id)).toEqual([a]);
  });

  it("keeps another VPS's backups out of reach and refuses malformed ids", async () => {
    const owned = await makeBackup(lxc);
    const del = await stack.http.delete(`/v1/vps/${qemu.id}/backups/${enc(owned)}`, { token });
    expect(del.status).toBe(404);
    const restore = await stack.http.post(`/v1/vps/${qemu.id}/backups/${enc(owned)}/restore`, { token });
    expect(restore.status).toBe(404);
    const stillThere = await stack.http.get(`/v1/vps/${lxc.id}/backups?limit=100`, { token });
    expect(stillThere.body.data.map((x: any) => x.id)).toContain(owned);

    for (const bad of ['placeholder', 'local:iso/debian.iso', '../../etc/passwd']) {
      const res = await stack.http.delete(`/v1/vps/${qemu.id}/backups/${enc(bad)}`, { token });
      expect(res.status, bad).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'backup_id' });
    }
    // Broken percent-encoding is bad input, not a server error.
    const broken = await stack.http.delete(`/v1/vps/${qemu.id}/backups/local%3Abackup%2Fvzdump%E0%A4%A`, { token });
    expect(broken.status, broken.text).toBe(400);
    expect(broken.body.error).toMatchObject({ code: 'validation_failed', param: 'path' });
    // An unencoded id has more path segments and matches no route.
    const raw = await stack.http.delete(`/v1/vps/${qemu.id}/backups/${owned}`, { token });
    expect(raw.status).toBe(404);
    expect(raw.body.error.code).toBe('route_not_found');
  });
});

describe('ordered VPS', () => {
  it('an order builds the machine with the ordered OS, hostname and cores', async () => {
    await seedOrders(stack.db);
    const res = await stack.http.post('/v1/orders', {
      token,
      headers: { 'idempotency-key': randomUUID() },
      body: { product: 'vps-s', promo_code: 'WELCOME100', options: { os: 'ubuntu-24.04', hostname: 'ordered.example.test', cores: 2 } },
    });
    expect(res.status, res.text).toBe(202);
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', result: { service: { family: 'vps', status: 'active' } } });
    const id = op.result.service.id;
    const vps = await stack.http.get(`/v1/vps/${id}`, { token });
    expect(vps.body).toMatchObject({
      type: 'qemu',
      hostname: 'ordered.example.test',
      state: 'running',
      cpu: { cores: 2 },
      primary_ip: op.result.service.primary_ip,
    });
    expect(vps.body.memory.total_bytes).toBe(2048 * 1024 ** 2);
    expect((await simulator(stack).inspect(vps.body.vmid)).template).toBe('local:import/ubuntu-24.04-server-cloudimg-amd64.qcow2');
    const ips = await stack.http.get(`/v1/vps/${id}/ips`, { token });
    expect(ips.body.data[0].address).toBe(op.result.service.primary_ip);
  });
});
