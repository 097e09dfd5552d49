/* global require, exports, process, setTimeout, clearTimeout, OK, DENY, DENYSOFT */
/* eslint-disable @typescript-eslint/no-require-imports */
// cloud_mail: the platform's Haraka plugin, the only one the MTA loads (providers/haraka/config.ts
// writes config/plugins). Copied to <dataDir>/plugins/cloud_mail.js at every start by
// providers/haraka/haraka.server.ts. Every decision goes to the hooks module named by
// CLOUD_MAIL_HOOKS (providers/haraka/hooks.ts: MtaHooks), loaded once.
//
//   capabilities      AUTH PLAIN LOGIN advertised to clients on this host only (no TLS here)
//   AUTH              hooks.authenticate; the principal is kept in connection.notes (235/535, 454)
//   MAIL FROM         530 without AUTH; hooks.checkSender (its refusal, 451 when it fails)
//   end of DATA       hooks.accept with From/Subject/Message-ID: refusal, or Message-ID set,
//                     messageRef noted (transaction.notes, kept in the queue file), DKIM key held
//                     in memory only
//   queue_outbound    Authentication-Results removed, DKIM-signed (relaxed/relaxed, rsa-sha256)
//   get_mx            the smarthost of config/cloud_mail.ini, else the recipients' MX (DNS);
//                     the EHLO name (config/me)
//   delivered/deferred/bounce  hooks.recordDelivery per recipient; a bounce sends no DSN
//   shutdown          hooks.close
//
// A hook's throw or rejection is a temporary SMTP failure, never a crash: an exception escaping
// an async callback would kill Haraka (uncaughtException -> exit), so every promise here ends in
// a handler that calls next() and logs. Logs carry no password, key or message content.
//
// Haraka runs this file in vm.runInNewContext: `require` resolves from Haraka's own location (the
// checkout's node_modules), and Node globals beyond timers/process/Buffer (URL, TextEncoder) are
// missing.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { PassThrough } = require('node:stream');
const DSN = require('haraka-dsn');
const utils = require('haraka-utils');
const addressparser = require('nodemailer/lib/addressparser');
const { dkimSign } = require('mailauth/lib/dkim/sign');

/** A hook that takes longer gets a temporary failure from us, before Haraka's plugin_timeout (30 s) answers for it. */
const HOOK_DEADLINE_MS = 25_000;
/** connection.notes key of the authenticated principal. */
const PRINCIPAL = 'cloud_mail_principal';
/** transaction.notes key: serialised into the queue file (hmail.todo.notes), so nothing secret. */
const NOTES = 'cloud_mail';
/** Signed when present (mailauth signs only the fields a message has). */
const SIGNED_HEADERS = [
  'From',
  'Sender',
  'Reply-To',
  'Subject',
  'Date',
  'Message-ID',
  'To',
  'Cc',
  'MIME-Version',
  'Content-Type',
  'Content-Transfer-Encoding',
  'In-Reply-To',
  'References',
  'List-Unsubscribe',
  'List-Unsubscribe-Post',
].join(':');
/**
 * The DKIM key of each accepted transaction, from end of DATA to its signing in queue_outbound. In
 * memory only: transaction.notes would put the private key into the queue file.
 */
const signingKeys = new WeakMap();

const TEMP_FAILURE = () => DSN.create(451, 'Temporary failure, please try again later', 3, 0);
const AUTH_REQUIRED = () => DSN.create(530, 'Authentication required', 7, 0);

// ---------------------------------------------------------------- loading

exports.register = function () {
  // auth_base parses AUTH PLAIN/LOGIN and answers 235/535; we supply check_plain_passwd.
  this.inherits('auth/auth_base');
  // auth_base would keep the password in connection.notes.auth_passwd.
  this.blankout_password = true;
  this.smarthost = readSmarthost(this.config.get('cloud_mail.ini'));
  this.helo_name = String(this.config.get('me') || '').trim() || os.hostname();
  this.mta = loadHooks();
};

/** The hooks module, required now (a bad path or module stops Haraka at start) and created once. */
function loadHooks() {
  const file = process.env.CLOUD_MAIL_HOOKS;
  if (!file || !path.isAbsolute(file)) throw new Error('CLOUD_MAIL_HOOKS must name the MTA hooks module by absolute path');
  const mod = require(file);
  if (typeof mod.createMtaHooks !== 'function') throw new Error(`${file} exports no createMtaHooks()`);
  const ready = Promise.resolve().then(() => mod.createMtaHooks());
  ready.catch(() => undefined); // every hook awaits it; hook_init_master reports a failure
  return ready;
}

function readSmarthost(cfg) {
  const host = String(cfg.smarthost?.host ?? '').trim();
  const port = Number(cfg.smarthost?.port);
  return host && Number.isInteger(port) && port > 0 ? { host, port } : null;
}

/**
 * Runs once the port listens (nodes=0: the process that also runs the outbound queue). Haraka exits
 * when this denies, so hooks that cannot be created stop the start instead of failing every mail.
 * The `ready` file tells the manager that the server is ready to take mail.
 */
exports.hook_init_master = function (next) {
  const fail = (what) => (err) => {
    this.logcrit(`${what}: ${err.message}`);
    next(DENY, what);
  };
  const ready = () =>
    fs.promises.writeFile(path.join(process.env.HARAKA, 'ready'), `${process.pid}\n`, { mode: 0o600 }).then(() => {
      this.loginfo('hooks ready');
      next();
    }, fail('cannot write the ready file'));
  this.mta.then(ready, fail('createMtaHooks failed')).catch((err) => this.logcrit(`init_master not handled: ${err.message}`));
};

exports.shutdown = function () {
  this.mta
    .then((hooks) => hooks.close())
    .then(
      () => this.loginfo('hooks closed'),
      (err) => this.logerror(`closing the hooks failed: ${err.message}`),
    );
};

// ---------------------------------------------------------------- calling the hooks

/** `promise`, or a rejection once `ms` passed. */
function within(promise, ms, what) {
  let timer;
  const deadline = new Promise((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** hooks[name](...args) as a promise (a synchronous throw is a rejection), bounded by HOOK_DEADLINE_MS. */
exports.call_hook = function (name, args) {
  return within(
    this.mta.then((hooks) => hooks[name](...args)),
    HOOK_DEADLINE_MS,
    name,
  );
};

/**
 * Runs hook `name` and hands its outcome to `done(err, value)` exactly once. Whatever `done`
 * throws is logged, never left to kill the process (Haraka's plugin timeout then answers).
 */
exports.ask = function (name, args, done) {
  this.call_hook(name, args)
    .then(
      (value) => done(null, value),
      (err) => done(err),
    )
    .catch((err) => this.logcrit(`${name} outcome not handled: ${err.message}`));
};

function tempFail(plugin, connection, next, what, err) {
  connection.logerror(plugin, `${what} failed: ${err.message}`);
  next(DENYSOFT, TEMP_FAILURE());
}

/** One line, no control characters, bounded: what a client or a log may see. */
function oneLine(text, max = 300) {
  return String(text ?? '')
    .replace(/[\x00-\x1f\x7f]+/g, ' ') // eslint-disable-line no-control-regex
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, max);
}

/**
 * A hook's refusal as Haraka's DSN (whose code replaces the 550/450 Haraka would send): its code
 * (4xx/5xx, else 451) and message; an enhanced status code leading the message is kept, else X.7.1.
 */
function refusalDsn(refusal) {
  const code = Number.isInteger(refusal.code) && refusal.code >= 400 && refusal.code <= 599 ? refusal.code : 451;
  const text = oneLine(refusal.message) || (code >= 500 ? 'Refused' : 'Please try again later');
  const enhanced = /^[245]\.(\d{1,3})\.(\d{1,3})\s+(.+)$/.exec(text);
  return enhanced ? DSN.create(code, enhanced[3], Number(enhanced[1]), Number(enhanced[2])) : DSN.create(code, text, 7, 1);
}

function refuse(next, refusal) {
  const dsn = refusalDsn(refusal);
  next(dsn.code >= 500 ? DENY : DENYSOFT, dsn);
}

// ---------------------------------------------------------------- AUTH

/**
 * AUTH without TLS, to clients on this host only (loopback or one of its own addresses): the
 * submission port serves the data plane and local relays; nothing else can authenticate, as
 * auth_base accepts only the methods offered here.
 */
exports.hook_capabilities = function (next, connection) {
  if (connection.remote.is_local) {
    connection.capabilities.push('AUTH PLAIN LOGIN');
    connection.notes.allowed_auth_methods = ['PLAIN', 'LOGIN'];
  }
  next();
};

/** A second AUTH on an authenticated session is refused (RFC 4954 4); the rest is auth_base's. */
exports.hook_unrecognized_command = function (next, connection, params) {
  if (String(params[0]).toUpperCase() === 'AUTH' && connection.notes[PRINCIPAL]) {
    connection.respond(503, '5.5.1 Already authenticated', () => next(OK));
    return;
  }
  this.base['auth/auth_base'].hook_unrecognized_command.call(this, next, connection, params);
};

/** auth_base's password check for PLAIN and LOGIN: cb(valid[, {code, message}]). */
exports.check_plain_passwd = function (connection, user, password, cb) {
  this.ask('authenticate', [user, password], (err, principal) => {
    if (err) {
      connection.logerror(this, `authenticate failed: ${err.message}`);
      return cb(false, { code: 454, message: '4.7.0 Temporary authentication failure' });
    }
    if (!principal) return cb(false);
    connection.notes[PRINCIPAL] = principal;
    cb(true);
  });
};

// ---------------------------------------------------------------- MAIL FROM

/** At most this many recipients per message (as `/emails`, 3 x 50): one send must not become a mass mailing. */
const MAX_RECIPIENTS = 150;
exports.hook_rcpt = function (next, connection) {
  const txn = connection.transaction;
  if (txn && txn.rcpt_to.length >= MAX_RECIPIENTS) return next(DENYSOFT, DSN.create(452, `Too many recipients (at most ${MAX_RECIPIENTS} per message)`, 5, 3));
  next();
};

exports.hook_mail = function (next, connection, params) {
  const principal = connection.notes[PRINCIPAL];
  if (!principal) return next(DENY, AUTH_REQUIRED());
  const from = params[0];
  // Nothing we send may bounce to nobody: a null sender is for DSNs, which we do not relay.
  if (from.isNull()) return next(DENY, DSN.create(550, 'A null sender is not accepted for submission', 7, 1));
  this.ask('checkSender', [principal, from.address], (err, refusal) => {
    if (err) return tempFail(this, connection, next, 'checkSender', err);
    if (refusal) return refuse(next, refusal);
    next();
  });
};

// ---------------------------------------------------------------- end of DATA

/** The From header's first address, its domain lower-cased; null without one. */
/**
 * The sender the message shows: its one From header's one address (lower-case domain), or null when
 * it has none, several From headers, several addresses in one, or a Sender of another domain.
 * Anything else would let a customer show another domain's address above a signature of its own.
 */
function headerFromOf(header) {
  const froms = header.get_all('From');
  if (froms.length !== 1) return null;
  const addresses = addressparser(froms[0] || '', { flatten: true }).filter((a) => a.address);
  if (addresses.length !== 1 || !addresses[0].address.includes('@')) return null;
  const address = addresses[0].address;
  const at = address.lastIndexOf('@');
  const domain = address.slice(at + 1).toLowerCase();
  const senders = header.get_all('Sender');
  if (senders.length > 1) return null;
  if (senders.length === 1) {
    const sender = addressparser(senders[0] || '', { flatten: true }).filter((a) => a.address);
    if (sender.length !== 1 || sender[0].address.slice(sender[0].address.lastIndexOf('@') + 1).toLowerCase() !== domain) return null;
  }
  return `${address.slice(0, at)}@${domain}`;
}

function incomingOf(txn) {
  return {
    envelopeFrom: txn.mail_from.address,
    recipients: txn.rcpt_to.map((r) => r.address),
    headerFrom: headerFromOf(txn.header),
    subject: oneLine(txn.header.get_decoded('Subject'), 998),
    messageId: oneLine(txn.header.get('Message-ID'), 998) || null,
  };
}

/** Message-ID set when asked, the message's reference noted, its key held for signing. */
function applyAcceptance(txn, acceptance) {
  const messageId = oneLine(acceptance.setMessageId, 998);
  if (messageId) {
    txn.remove_header('Message-ID');
    txn.add_header('Message-ID', messageId);
  }
  const dkim = acceptance.dkim;
  txn.notes[NOTES] = { messageRef: acceptance.messageRef, dkim: dkim ? { domain: dkim.domain, selector: dkim.selector } : null };
  if (dkim) signingKeys.set(txn, dkim);
}

exports.hook_data_post = function (next, connection) {
  const txn = connection.transaction;
  const principal = connection.notes[PRINCIPAL];
  if (!txn) return next();
  if (!principal) return next(DENY, AUTH_REQUIRED());
  this.ask('accept', [principal, incomingOf(txn)], (err, answer) => {
    if (err) return tempFail(this, connection, next, 'accept', err);
    if (answer?.refused) return refuse(next, answer);
    if (!answer?.messageRef) return tempFail(this, connection, next, 'accept', new Error('no messageRef in its answer'));
    if (connection.transaction !== txn) return next(); // the client went away meanwhile
    applyAcceptance(txn, answer);
    next();
  });
};

// ---------------------------------------------------------------- signing, just before the queue

/** The DKIM-Signature header's value for the message as it stands (unstuffed, CRLF). */
async function signatureOf(txn, key) {
  const source = new PassThrough();
  txn.message_stream.pipe(source);
  try {
    const result = await dkimSign(source, {
      canonicalization: 'relaxed/relaxed',
      algorithm: 'rsa-sha256',
      headerList: SIGNED_HEADERS,
      signatureData: [{ signingDomain: key.domain, selector: key.selector, privateKey: key.privateKeyPem }],
    });
    if (result.errors?.length) throw new Error(result.errors[0].err?.message ?? 'signing error');
    const header = /^DKIM-Signature:\s*([\s\S]*?)\r?\n?$/i.exec(result.signatures)?.[1];
    if (!header) throw new Error('no signature produced');
    return header;
  } finally {
    txn.message_stream.unpipe(); // see haraka/message-stream#22
  }
}

/**
 * Last changes before outbound writes the queue file: Haraka's Authentication-Results for our own
 * submission goes (it would tell every recipient how the sender authenticated to us, and a failed
 * attempt's username; receivers care about DKIM/SPF, not our AUTH), a missing Date is added (so it
 * is signed), then the DKIM signature. A signing failure is a 451: the client retries.
 */
exports.hook_queue_outbound = function (next, connection) {
  const txn = connection.transaction;
  if (!txn) return next();
  txn.remove_header('Authentication-Results');
  if (!txn.header.get('Date')) txn.add_header('Date', utils.date_to_str(new Date()));
  const key = signingKeys.get(txn);
  if (!key) return next();
  signingKeys.delete(txn);
  signatureOf(txn, key)
    .then(
      (signature) => {
        txn.add_leading_header('DKIM-Signature', signature);
        next();
      },
      (err) => tempFail(this, connection, next, `DKIM signing for ${key.domain}`, err),
    )
    .catch((err) => this.logcrit(`queue_outbound not handled: ${err.message}`));
};

// ---------------------------------------------------------------- routing

/**
 * Also names us in the outbound EHLO through the note Haraka reads for it: its default (config/me,
 * set on each MX found) is skipped when NODE_ENV=test, which the hooks may need, and an empty EHLO
 * is refused by every remote.
 */
exports.hook_get_mx = function (next, hmail) {
  if (hmail.todo?.notes && !hmail.todo.notes.outbound_helo) hmail.todo.notes.outbound_helo = this.helo_name;
  if (!this.smarthost) return next(); // Haraka's own MX lookup
  next(OK, { priority: 0, exchange: this.smarthost.host, port: this.smarthost.port });
};

// ---------------------------------------------------------------- delivery outcomes

/** A recipient's last remote reply (`550 5.1.1 ...`), else Haraka's reason for it. */
function responseOf(rcpt, fallback) {
  if (rcpt.dsn_smtp_code) return oneLine(`${rcpt.dsn_smtp_code} ${rcpt.dsn_smtp_extc ?? ''} ${rcpt.dsn_smtp_response ?? ''}`);
  return oneLine(rcpt.reason ?? fallback) || null;
}

const addressOf = (rcpt) => (typeof rcpt === 'string' ? rcpt : (rcpt.address ?? String(rcpt)));

/**
 * hooks.recordDelivery for each recipient, then next(code). next waits for the records: the queue
 * file goes only after them, so a crash in between replays the outcome (at least once). A record
 * that fails is logged and not retried (the outcome happened either way).
 */
exports.record = function (hmail, kind, rcpts, response, next, code) {
  const messageRef = hmail.todo?.notes?.[NOTES]?.messageRef;
  if (!messageRef) {
    hmail.logwarn(this, `${kind}: no messageRef in the queued message, not recorded`);
    return next(code);
  }
  const at = new Date();
  const events = rcpts.map((rcpt) => ({ messageRef, recipient: addressOf(rcpt), kind, response: response(rcpt), at }));
  const all = events.reduce((chain, event) => chain.then(() => this.mta.then((hooks) => hooks.recordDelivery(event))), Promise.resolve());
  within(all, HOOK_DEADLINE_MS, 'recordDelivery')
    .then(
      () => next(code),
      (err) => {
        hmail.logerror(this, `recordDelivery (${kind}) failed: ${err.message}`);
        next(code);
      },
    )
    .catch((err) => this.logcrit(`${kind} not handled: ${err.message}`));
};

/** params: [host, ip, response, delay, port, mode, ok_recips, secured, authenticated]; Haraka keeps only the text of the final 2xx reply. */
exports.hook_delivered = function (next, hmail, params) {
  const [, , response, , , , okRecipients] = params;
  this.record(hmail, 'delivered', okRecipients, () => oneLine(`250 ${response ?? ''}`), next);
};

/** params: { delay, err, fail_recips?, mx? }. next() (CONT): retried per temp_fail_intervals. */
exports.hook_deferred = function (next, hmail, params) {
  const rcpts = params.fail_recips?.length ? params.fail_recips : hmail.todo.rcpt_to;
  this.record(hmail, 'deferred', rcpts, (rcpt) => responseOf(rcpt, params.err), next);
};

/** err: bounced_rcpt (5xx), deferred_rcpt (retries exhausted) or neither (the whole message). OK: Haraka sends no DSN. */
exports.hook_bounce = function (next, hmail, err) {
  const rcpts = err.bounced_rcpt?.length ? err.bounced_rcpt : err.deferred_rcpt?.length ? err.deferred_rcpt : hmail.todo.rcpt_to;
  this.record(hmail, 'bounced', rcpts, (rcpt) => responseOf(rcpt, err.message), next, OK);
};
