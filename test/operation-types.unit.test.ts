import { describe, expect, it } from 'vitest';
import type { Principal } from '../domain/principal';
import { OperationStarts, type StartOperationInput } from '../domain/operations/start';
import { OPERATION_TYPES, operationTypeEntry, releaseOf, workflowNaming } from '../domain/operations/types';
import { releaseReinstall } from '../domain/vps/store';

/**
 * The operation table (domain/operations/types.ts): one entry per type, which the start path and the
 * orphan sweeper read. That its workflows exist and take an operation's input is checked by the
 * compiler (`satisfies`); what it decides at run time is checked here.
 */
describe('the operation types table', () => {
  it('holds the types DECISIONS lists, and only those', () => {
    expect(Object.keys(OPERATION_TYPES).sort()).toEqual(
      [
        'vps.power',
        'vps.reinstall',
        'vps.backup',
        'vps.restore',
        'orders.create',
        'dbaas.backup',
        'dbaas.restart',
        'caas.deploy',
        'objectstorage.empty',
        'wordpress.backup',
        'wordpress.restore',
        'wordpress.recipe_apply',
      ].sort(),
    );
  });

  it('gives the orphan sweeper a release only for the types whose request claims something', () => {
    const claiming = Object.keys(OPERATION_TYPES).filter((type) => releaseOf(type));
    expect(claiming.sort()).toEqual(['caas.deploy', 'orders.create', 'vps.reinstall', 'wordpress.backup']);
    expect(operationTypeEntry('vps.reinstall')?.claims?.release).toBe(releaseReinstall);
  });

  it('knows nothing of a type outside it (a test-only type, an inherited key)', () => {
    expect(operationTypeEntry('test.operation')).toBeUndefined();
    expect(operationTypeEntry('constructor')).toBeUndefined();
    expect(releaseOf('toString')).toBeUndefined();
  });

  it("names a run in Temporal by the operation's id, type, account and resource", () => {
    const naming = workflowNaming({ id: 'op_01', type: 'vps.power', accountId: 7, resource: { object: 'vps', id: 'svc_3' }, credentialId: 'key_1' });
    expect(naming).toEqual({
      workflowId: 'op_01',
      searchAttributes: { operationType: 'vps.power', accountId: 'cus_7', resourceId: 'svc_3' },
      memo: { operation_type: 'vps.power', account: 'cus_7', resource: 'vps svc_3', credential: 'key_1' },
    });
  });
});

describe('the start path reads the table', () => {
  // Everything below is refused before the operation's row is written: no database is needed.
  const starts = new OperationStarts(null as never, null as never, { startTimeoutMs: 1_000, logger: null as never });
  const principal = { accountId: 1, credentialId: 'key_1' } as Principal;
  const start = (input: Omit<Partial<StartOperationInput>, 'type'> & { type: string }) => starts.start({ principal, input: {}, ...input } as never);

  it("refuses a workflow other than the type's, a type that finishes inside its request, and a resource of another kind", async () => {
    await expect(start({ type: 'vps.power', workflow: 'vpsBackupWorkflow' as never })).rejects.toThrow(
      'operation type vps.power runs vpsPowerWorkflow, not vpsBackupWorkflow',
    );
    await expect(start({ type: 'dbaas.restart' })).rejects.toThrow(/has no workflow: it finishes inside its request/);
    await expect(start({ type: 'vps.power', resource: { object: 'dbaas', id: 'svc_1' } })).rejects.toThrow('is about a vps, not a dbaas');
  });

  it('refuses a type outside the table unless it names its workflow (test-only types)', async () => {
    await expect(start({ type: 'test.unknown' })).rejects.toThrow(/not in OPERATION_TYPES/);
  });
});
