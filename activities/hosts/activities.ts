import { ApplicationFailure } from '@temporalio/activity';
import { backendOf } from '../../common/families';
import type { HostStatus } from '../../common/hosts';
import { placeIfHosted } from '../../domain/hosts/directory';
import { endMove, hostStatus, placementOf } from '../../domain/hosts/registry';
import { claimMove, MoveRefused } from '../../domain/hosts/move';
import { provisionTargetOf } from '../../domain/provisioning';
import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import type { Providers } from '../../providers';
import { HOST_CALL_PURPOSE, type HostCallContent, type SealedHostCall } from '../../providers/host-routing';
import type { Keyring } from '../../common/crypto';
import { decodeValue, encodeError, encodeValue, type WireOutcome } from '../../providers/host-wire';

/** What a workflow learns of a host before it sends work there. */
export interface HostAvailability {
  status: HostStatus | 'unknown';
  /** Said to the operation's poller while the host is down (`result.waiting`). */
  message: string;
}

/**
 * Activities of hosts and placement (docs/hosts.md): the call a host makes on its own servers for
 * a `hostCallWorkflow`, and what workflows ask before they route work to a host.
 */
export function createHostActivities({ db, providers, logger, keyring }: { db: Knex; providers: Providers; logger: Logger; keyring: Keyring }) {
  return {
    /**
     * Runs one provider call on this host's own servers (the local activity of `hostCallWorkflow`).
     * Its outcome is returned, never thrown, so a refusal reaches the caller as the same error.
     */
    async hostProviderCall(travelled: SealedHostCall): Promise<WireOutcome> {
      const refuse = (why: string): WireOutcome => ({ ok: false, error: { kind: 'error', message: why } });
      let call: HostCallContent;
      try {
        call = JSON.parse(keyring.decrypt(HOST_CALL_PURPOSE, travelled.sealed)) as HostCallContent;
      } catch {
        return refuse('the call is not sealed by this control plane');
      }
      // Only what was sealed counts; a call past its time is one its caller gave up on (or a copy).
      if (Date.now() > call.expiresAt) return refuse('the call came after its caller stopped waiting');
      // Only the providers whose servers run on hosts, and (through their router) only their interface's methods.
      if (!providers.localServers.some((l) => l.key === call.key && l.family === call.family))
        return refuse(`${call.key}.${call.method} is not a call this host takes`);
      const provider = (providers as unknown as Record<string, Record<string, unknown>>)[call.key];
      try {
        const method = provider[call.method];
        if (typeof method !== 'function') throw new Error(`${call.key}.${call.method} is not a call this host takes`);
        const value = await (method as (...a: unknown[]) => Promise<unknown>).apply(provider, call.args.map(decodeValue));
        return { ok: true, value: encodeValue(value) };
      } catch (err) {
        const error = encodeError(err, call.family);
        if (error.kind === 'error') logger.error({ err, call: `${call.key}.${call.method}`, service: `svc_${call.serviceId}` }, 'host call failed');
        return { ok: false, error };
      }
    },

    /** Whether a host takes work now, and what to tell the operation's poller while it does not. */
    async hostAvailability(host: string): Promise<HostAvailability> {
      const found = await hostStatus(db, host);
      if (!found)
        return { status: 'unknown', message: `The server of this resource is on host ${host}, which is not registered; this operation continues when it is.` };
      const message =
        found.status === 'down'
          ? `The server of this resource is on host ${host}, which has not answered since ${found.heartbeat_at.toISOString()}; this operation continues when it is back.`
          : '';
      return { status: found.status, message };
    },

    /** Places a service on a host if its family's servers run on hosts (idempotent): its host, or null. */
    async placeService(serviceId: number): Promise<{ host: string | null }> {
      const target = await provisionTargetOf(db, serviceId);
      if (!target) return { host: null };
      return { host: await placeIfHosted(db, providers.hosts, backendOf(target.productFamily), serviceId) };
    },

    /** A move that did not complete: the server stays where it is placed, and takes calls again. */
    async endServiceMove(input: { serviceId: number }): Promise<void> {
      await endMove(db, input.serviceId);
    },

    /** The host a service's server is on, or null (not placed, or its family runs on no host). */
    async hostOfService(serviceId: number): Promise<{ host: string | null }> {
      return { host: (await placementOf(db, serviceId))?.host ?? null };
    },
  };
}

export type HostActivities = ReturnType<typeof createHostActivities>;

/** `claimMove` for a move workflow's first activity: a refusal fails it for good (retrying cannot help). */
export async function claimMoveOrFail(db: Knex, family: string, serviceId: number, to?: string | null): Promise<{ from: string; to: string }> {
  try {
    return await claimMove(db, family, serviceId, to);
  } catch (err) {
    if (err instanceof MoveRefused) throw ApplicationFailure.nonRetryable(err.message, 'MoveRefused');
    throw err;
  }
}
