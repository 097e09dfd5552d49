/**
 * Names shared by the control plane and the workflows (no Node built-ins here: the workflow bundle
 * imports this module). docs/hosts.md describes hosts, placement and routing.
 */

/** A host's name: what HOST_NAME may be, and what its task queue is made of. */
export const HOST_NAME_PATTERN = /^[a-z0-9][a-z0-9.-]{0,62}$/;

/** The task queue a host agent polls beside the shared one: the work for the servers placed on it. */
export function hostQueue(host: string): string {
  return `host-${host}`;
}

/** What the registry says of a host: `down` three heartbeats after its last, `draining` while drained (it still serves what it has). */
export type HostStatus = 'up' | 'down' | 'draining';
