import { z } from 'zod';
import { normalizeZoneName } from '../../../domain/dns/names';
import { DnsZoneProvisioner, zoneDefaults } from '../../../domain/dns/provisioner';
import { findZoneOfService } from '../../../domain/dns/store';
import { findServiceOfFamily } from '../../../domain/services';
import { notFound } from '../../../domain/errors';
import { defineDevRoute } from '../../route';
import { idParam } from '../../schemas';
import { presentZone } from './schemas';

/**
 * Local stand-in for the DNS family (CLOUD_DEV_ENDPOINTS=1, loopback only): give a dns service its
 * zone on the DNS server, as provisioning an order does (for services made without an order).
 */
export const dnsDevRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/dns/{id}/zone',
    operationId: 'devDnsCreateZone',
    summary: 'Create the zone of a dns service on the DNS server (what provisioning does)',
    params: z.object({ id: idParam('svc_2') }),
    body: z.object({ zone: z.string().min(1).max(300).optional().meta({ description: 'Default: the service label' }) }).strict(),
    responses: [{ status: 200, description: 'The zone' }],
    async handler({ params, body, deps }) {
      const service = await findServiceOfFamily(deps.db, params.id, 'dns');
      const target = {
        id: Number(service.id),
        accountId: Number(service.account_id),
        family: 'dns',
        productFamily: 'dns',
        product: service.product ?? 'dns-zone',
        label: service.label,
        options: body.zone ? { zone: normalizeZoneName(body.zone) } : {},
        billingCycle: service.billing_cycle,
      };
      await new DnsZoneProvisioner(deps.db, deps.providers.dns, zoneDefaults(deps.config)).provision(target);
      const zone = await findZoneOfService(deps.db, target.id);
      if (!zone) throw notFound('DNS zone');
      return { body: presentZone(zone, null) };
    },
  }),
];
