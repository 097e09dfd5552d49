import { timingSafeEqual } from 'node:crypto';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import type { MtaAcceptance, MtaDeliveryEvent, MtaHooks, MtaIncoming, MtaPrincipal, MtaRefusal } from '../../providers/haraka/hooks';
import { countSend, newMessageId, recordOutcome, recordWithinQuota } from './messages';
import { enforceThresholds, type Thresholds } from './metrics';
import { monthlyLimitOf } from './plans';
import { gatewayOfCredential, platformPassword, PLATFORM_USERNAME } from './smtp';
import { DKIM_KEY_PURPOSE, findGateway, type DomainRow } from './store';

/**
 * The mail gateway's rules, as the MTA asks for them (providers/haraka/hooks.ts): who an SMTP
 * session is, whether it may send from a domain, the DKIM key of a message, and what became of each
 * recipient. Runs inside the MTA's process, on PostgreSQL.
 *
 * A customer's SMTP submission goes through the same checks as `/emails` (a verified sender domain,
 * sending not suspended, the month's quota) and is recorded and counted the same way; a refusal to
 * an authenticated credential counts as rejected. A `platform` message was checked, recorded and
 * counted by the data plane already: here it only gets its key.
 */
const refuse = (code: number, message: string): MtaRefusal => ({ refused: true, code, message });
const domainOf = (address: string): string => address.slice(address.lastIndexOf('@') + 1).toLowerCase();

export class MailGatewayMtaHooks implements MtaHooks {
  private readonly platformSecret: Buffer;

  constructor(
    private readonly db: Knex,
    private readonly keyring: Keyring,
    private readonly thresholds: Thresholds,
  ) {
    this.platformSecret = Buffer.from(platformPassword(keyring));
  }

  async authenticate(username: string, password: string): Promise<MtaPrincipal | null> {
    if (username === PLATFORM_USERNAME) {
      const given = Buffer.from(password);
      return given.length === this.platformSecret.length && timingSafeEqual(given, this.platformSecret) ? { kind: 'platform' } : null;
    }
    const serviceId = await gatewayOfCredential(this.db, username, password);
    return serviceId === null ? null : { kind: 'gateway', serviceId, username };
  }

  async checkSender(principal: MtaPrincipal, envelopeFrom: string): Promise<MtaRefusal | null> {
    if (principal.kind === 'platform') return null;
    const domain = domainOf(envelopeFrom);
    const verified = await this.verifiedDomains(principal.serviceId);
    if (verified.some((d) => d.domain === domain || d.mail_from_host === domain)) return null;
    await countSend(this.db, principal.serviceId, 'rejected');
    return refuse(550, `5.7.1 The sender domain ${domain} is not a verified domain of this mail gateway`);
  }

  async accept(principal: MtaPrincipal, incoming: MtaIncoming): Promise<MtaAcceptance | MtaRefusal> {
    if (principal.kind === 'platform') return this.acceptPlatform(incoming);
    const serviceId = principal.serviceId;
    const rejected = async (code: number, message: string) => {
      await countSend(this.db, serviceId, 'rejected');
      return refuse(code, message);
    };
    // The credential may have been rotated since this session authenticated: it stops at once.
    const live = await this.db('mail_smtp_credentials').where({ username: principal.username, service_id: serviceId }).whereNull('deactivated_at').first('id');
    if (!live) return refuse(550, '5.7.8 The SMTP credential is no longer active');
    if (!incoming.headerFrom) return rejected(550, '5.7.1 A message needs exactly one From address (and a Sender, if any, of its domain)');
    const fromDomain = domainOf(incoming.headerFrom);
    const domain = (await this.verifiedDomains(serviceId)).find((d) => d.domain === fromDomain);
    if (!domain) return rejected(550, `5.7.1 The From domain ${fromDomain} is not a verified domain of this mail gateway`);
    const [gateway, service] = await Promise.all([findGateway(this.db, serviceId), this.db('services').where({ id: serviceId }).first('status')]);
    if (!gateway || service?.status !== 'active') return rejected(550, '5.7.1 This mail gateway is not active');
    if (gateway.sending_suspended_at) return rejected(550, `5.7.1 Sending is suspended: ${gateway.sending_suspended_reason ?? 'see the mail gateway'}`);
    const id = newMessageId();
    const recorded = await this.db.transaction((trx) =>
      recordWithinQuota(
        trx,
        { id, serviceId, domain: domain.domain, from: incoming.headerFrom!, subject: incoming.subject, recipients: incoming.recipients, via: 'smtp' },
        monthlyLimitOf(gateway.plan),
      ),
    );
    if (!recorded) return rejected(452, "4.5.3 This month's sending quota is used up");
    return { messageRef: id, setMessageId: incoming.messageId ? null : `<${id}@${domain.domain}>`, dkim: this.keyOf(domain) };
  }

  /** The data plane's message: recorded already, named by its Message-ID `<msg_...@domain>`. */
  private async acceptPlatform(incoming: MtaIncoming): Promise<MtaAcceptance | MtaRefusal> {
    const id = /^<(msg_[0-9A-Za-z]+)@/.exec(incoming.messageId ?? '')?.[1];
    const message = id ? await this.db('mail_messages').where({ id }).first('service_id', 'domain') : null;
    if (!id || !message) return refuse(550, '5.7.1 Unknown message');
    const domain = await this.db('mail_domains').where({ service_id: message.service_id, domain: message.domain }).first();
    // A domain deleted since the send: the message still goes, unsigned (it was accepted).
    return { messageRef: id, setMessageId: null, dkim: domain ? this.keyOf(domain as DomainRow) : null };
  }

  async recordDelivery(event: MtaDeliveryEvent): Promise<void> {
    const recorded = await recordOutcome(this.db, {
      messageId: event.messageRef,
      recipient: event.recipient,
      kind: event.kind,
      response: event.response,
      at: event.at,
    });
    if (recorded && event.kind === 'bounced') await enforceThresholds(this.db, recorded.serviceId, this.thresholds);
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }

  private async verifiedDomains(serviceId: number): Promise<DomainRow[]> {
    return this.db('mail_domains').where({ service_id: serviceId, status: 'verified' });
  }

  /** Unsealed keys by their sealed text (a new pair is a new text): not unsealed again for every message. */
  private readonly keys = new Map<string, string>();

  private keyOf(domain: DomainRow): MtaAcceptance['dkim'] {
    let pem = this.keys.get(domain.dkim_private_sealed);
    if (!pem) {
      pem = this.keyring.decrypt(DKIM_KEY_PURPOSE, domain.dkim_private_sealed);
      if (this.keys.size >= 1_000) this.keys.clear();
      this.keys.set(domain.dkim_private_sealed, pem);
    }
    return { domain: domain.domain, selector: domain.dkim_selector, privateKeyPem: pem };
  }
}
