import type { Knex } from 'knex';
import type { HypervisorProvider, MachineType } from '../../providers/hypervisor.provider';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { attachVpsMachine, detachVpsMachine, findServer } from './store';

/** Machine sizes of the VPS products of the catalog (db/seeds/orders.seed.ts); others get the smallest. */
const SIZES: Record<string, { cores: number; memoryMb: number; diskGb: number; type?: MachineType }> = {
  'vps-s': { cores: 1, memoryMb: 2048, diskGb: 40 },
  'vps-l': { cores: 8, memoryMb: 32768, diskGb: 320 },
  'vps-container': { cores: 1, memoryMb: 1024, diskGb: 10, type: 'lxc' },
};

/**
 * Builds an ordered VPS on the hypervisor: its machine (with the ordered OS, hostname and cores) and
 * the control plane's record of it. Active once the machine runs and its guest OS answers.
 */
export class VpsProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly hypervisor: HypervisorProvider,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    const size = SIZES[service.product] ?? SIZES['vps-s'];
    const options = service.options;
    await attachVpsMachine(
      this.db,
      this.hypervisor,
      // Ordered machines get their address from the documentation range TEST-NET-2.
      { id: service.id, label: service.label, primary_ip: `198.51.100.${(service.id % 250) + 1}` },
      {
        type: size.type ?? 'qemu',
        hostname: typeof options.hostname === 'string' ? options.hostname : undefined,
        cores: typeof options.cores === 'number' ? options.cores : size.cores,
        memoryMb: size.memoryMb,
        diskGb: size.diskGb,
        os: typeof options.os === 'string' ? options.os : undefined,
      },
    );
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    const server = await findServer(this.db, service.id);
    if (!server) return false;
    const guest = await this.hypervisor.guest(server.vmid);
    return guest.agentReady;
  }

  /** Destroys the machine and forgets it; its backups stay on the backup storage. */
  async deprovision(service: ProvisionTarget): Promise<void> {
    const server = await findServer(this.db, service.id);
    if (!server) return;
    await this.hypervisor.destroyMachine(server.vmid);
    await detachVpsMachine(this.db, service.id);
  }
}
