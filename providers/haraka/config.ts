/**
 * Haraka's configuration files for one server (`<dataDir>/config/`), rendered from the manager's
 * settings and options and written again at every start (edits there are overwritten).
 *
 * Why every file is here, none left to Haraka's defaults: a file present in `<dataDir>/config`
 * REPLACES Haraka's shipped one (no merge), and a file absent falls back to it. `plugins` must
 * list only ours (the shipped list loads rcpt_to.in_host_list, smtp_forward, ...), `smtp.ini`
 * must bind the submission port on the bind address (the shipped one is `[::0]:25`), and
 * `connection.ini` must keep every section, as connection.js has no fallback for them.
 *
 * Secrets: `internalcmd_key` is the only one written (random at each start). Without it any local
 * process may send `INTERNALCMD <server method>` (performShutdown, flushQueue) over SMTP. The
 * hooks' secrets (database URL, master key) reach the process through its environment only.
 */
import { randomBytes } from 'node:crypto';
import { joinHostPort, splitHostPort } from '../local-server';

/** What the files are rendered from. */
export interface HarakaConfigInput {
  dataDir: string;
  bindAddress: string;
  port: number;
  /** `config/me`: the name in the banner, in Received headers and in the outbound EHLO. */
  hostname: string;
  /** `host:port` every message is relayed to instead of the recipients' MX, or null. */
  smarthost: string | null;
  /** Haraka's `temp_fail_intervals` (`'5s*1'`, `'1m,5m,30m*4'`), or undefined for its default (13 retries, 64 s doubling). */
  tempFailIntervals?: string;
  /** Haraka's log level; default `notice`. */
  logLevel?: HarakaLogLevel;
}

export type HarakaLogLevel = 'data' | 'protocol' | 'debug' | 'info' | 'notice' | 'warn' | 'error';

/** Haraka's per-hook timeout (seconds); the plugin answers before it (HOOK_DEADLINE_MS in cloud_mail.js). */
export const PLUGIN_TIMEOUT_S = 30;
/** `force_shutdown_timeout`: after SIGTERM, Haraka exits by itself at the latest after this. */
export const FORCE_SHUTDOWN_S = 5;

const ini = (lines: string[]) => `; Written by providers/haraka/config.ts at every start; edits are overwritten.\n${lines.join('\n')}\n`;

/** `host:port` → its parts, or a clear error naming the option. */
export function parseSmarthost(smarthost: string): { host: string; port: number } {
  try {
    return splitHostPort(smarthost);
  } catch {
    throw new Error(`smarthost "${smarthost}" is not host:port`);
  }
}

/** smtp.ini: one foreground process (no cluster), graceful stop on SIGINT/SIGTERM. */
function smtpIni(c: HarakaConfigInput): string {
  return ini([
    '[main]',
    `listen=${joinHostPort(c.bindAddress, c.port)}`,
    '; 0: no cluster; one process listens and runs the outbound queue',
    'nodes=0',
    'inactivity_timeout=60',
    'graceful_shutdown=true',
    `force_shutdown_timeout=${FORCE_SHUTDOWN_S}`,
  ]);
}

/** connection.ini: Haraka's shipped file with every section, no version in banners, spool inside the data dir. */
function connectionIni(c: HarakaConfigInput): string {
  return ini([
    '[main]',
    '; messages stay in memory (-1: never spooled)',
    'spool_after=-1',
    `spool_dir=${c.dataDir}/spool`,
    '[haproxy]',
    'hosts[] =',
    '[headers]',
    'show_version=false',
    'max_lines=1000',
    'max_received=100',
    '[max]',
    'bytes=26214400',
    'mime_parts=1000',
    'line_length=512',
    'data_line_length=992',
    '[message]',
    'helo=ready',
    'close=closing connection.',
    '[uuid]',
    'banner_chars=6',
    'deny_chars=0',
  ]);
}

/**
 * outbound.ini: STARTTLS stays on (Haraka's default) for real MX delivery; a smarthost is a relay
 * on our side (the test's sink, a local relay) and speaks plain SMTP.
 */
function outboundIni(c: HarakaConfigInput): string {
  return ini([
    '[main]',
    ...(c.smarthost ? ['enable_tls=false'] : []),
    ...(c.tempFailIntervals ? [`temp_fail_intervals=${c.tempFailIntervals}`] : []),
    'concurrency_max=100',
    'received_header=Haraka outbound',
  ]);
}

/**
 * tls.ini: no certificate. The submission port serves clients on this host (AUTH offered to them
 * without TLS); without these empty names Haraka looks for config/tls_key.pem at every start and
 * logs its absence as an error. The sections are the shipped file's (outbound reads [redis]).
 */
function tlsIni(): string {
  return ini(['[main]', 'key=', 'cert=', '[redis]', '[no_tls_hosts]', '[mutual_auth_hosts]', '[mutual_auth_hosts_exclude]', '[outbound]']);
}

/** cloud_mail.ini: our plugin's own settings (the hooks module comes from CLOUD_MAIL_HOOKS in the environment). */
function cloudMailIni(c: HarakaConfigInput): string {
  const smarthost = c.smarthost ? parseSmarthost(c.smarthost) : null;
  return ini(['[smarthost]', "; empty: the recipients' MX (DNS)", `host=${smarthost?.host ?? ''}`, `port=${smarthost?.port ?? ''}`]);
}

/** Every file of `<dataDir>/config`, by name: content and mode. */
export function renderHarakaConfig(c: HarakaConfigInput): Map<string, { content: string; mode: number }> {
  const files = new Map<string, { content: string; mode: number }>();
  const put = (name: string, content: string, mode = 0o600) => files.set(name, { content, mode });
  put('smtp.ini', smtpIni(c));
  put('connection.ini', connectionIni(c));
  put('outbound.ini', outboundIni(c));
  put('tls.ini', tlsIni());
  put('cloud_mail.ini', cloudMailIni(c));
  put('plugins', "# Written by providers/haraka/config.ts: our plugin only (Haraka's shipped list would load others).\ncloud_mail\n");
  put('me', `${c.hostname}\n`);
  put('plugin_timeout', `${PLUGIN_TIMEOUT_S}\n`);
  // `notice`: starts, stops, failures and refusals; `info` would add about 1.5 KB per message (and 4 % of the MTA's CPU).
  put('log.ini', ini(['[main]', `level=${c.logLevel ?? 'notice'}`, 'timestamps=true', 'format=default']));
  put('internalcmd_key', `${randomBytes(32).toString('hex')}\n`);
  return files;
}
