/**
 * What the platform's MTA (Haraka, `providers/haraka/`) asks the platform while it runs: the
 * contract between our Haraka plugin (`providers/haraka/plugin/cloud_mail.js`, inside the Haraka
 * process) and the mail gateway's rules (`domain/mailgateway/mta-hooks.ts`, which reads and writes
 * PostgreSQL). The plugin loads the module named by `CLOUD_MAIL_HOOKS` (an absolute path; the
 * process runs with tsx, so it may be TypeScript) and calls its `createMtaHooks()` once at start.
 *
 * Every method may be slow (a database) and may throw; the plugin turns a throw into a temporary
 * SMTP failure (454 at AUTH, 451 elsewhere), never a crash of the MTA. Nothing here sees a message
 * body except `accept`'s headers.
 */

/** Who an SMTP session authenticated as. */
export type MtaPrincipal =
  /** A customer's SMTP credential (`POST /v1/mail-gateway/smtp`): sends for that gateway only. */
  | { kind: 'gateway'; serviceId: number; username: string }
  /** The platform's own `/emails` data plane, which has already checked and recorded the message. */
  | { kind: 'platform' };

/** A refusal, as SMTP sends it: `code` 4xx (temporary) or 5xx, and a one-line message for the client. */
export interface MtaRefusal {
  refused: true;
  code: number;
  message: string;
}

/** The headers of a message as received (after DATA), and its envelope. */
export interface MtaIncoming {
  envelopeFrom: string;
  recipients: string[];
  /** The `From` header's address (not its display name), lower-case domain. */
  headerFrom: string | null;
  subject: string;
  /** The `Message-ID` header as sent (with its angle brackets), or null. */
  messageId: string | null;
}

/** How to sign and tag an accepted message. */
export interface MtaAcceptance {
  refused?: false;
  /**
   * The platform's id of the message (`msg_<ulid>`): every delivery event names it. For a
   * `platform` message it is the id the data plane gave it; for a customer's SMTP submission
   * `accept` makes the record and returns its id.
   */
  messageRef: string;
  /** `Message-ID` to set when the message has none (`<msg_...@domain>`), else null. */
  setMessageId: string | null;
  /** The key to DKIM-sign with (`c=relaxed/relaxed`, `a=rsa-sha256`), or null to leave unsigned. */
  dkim: { domain: string; selector: string; privateKeyPem: string } | null;
}

/** One recipient's outcome of one delivery attempt. */
export interface MtaDeliveryEvent {
  messageRef: string;
  recipient: string;
  kind: 'delivered' | 'deferred' | 'bounced';
  /** The remote server's last reply (`250 ...`, `550 5.1.1 ...`), or Haraka's reason. */
  response: string | null;
  at: Date;
}

export interface MtaHooks {
  /** AUTH PLAIN/LOGIN. null: wrong username or password (535). */
  authenticate(username: string, password: string): Promise<MtaPrincipal | null>;
  /** MAIL FROM of an authenticated session: null to go on, or a refusal (`550` for a sender the principal may not use). */
  checkSender(principal: MtaPrincipal, envelopeFrom: string): Promise<MtaRefusal | null>;
  /** After DATA: accept (and how to sign it), or refuse (`550` unverified from-domain, `550`/`451` sending suspended, `452` over quota). */
  accept(principal: MtaPrincipal, incoming: MtaIncoming): Promise<MtaAcceptance | MtaRefusal>;
  /** A recipient's delivery attempt ended. Called at least once per outcome (a replay after a crash may repeat it). */
  recordDelivery(event: MtaDeliveryEvent): Promise<void>;
  /** The MTA is stopping: close database pools. */
  close(): Promise<void>;
}

/** What the module named by `CLOUD_MAIL_HOOKS` exports. */
export interface MtaHooksModule {
  createMtaHooks(): MtaHooks | Promise<MtaHooks>;
}
