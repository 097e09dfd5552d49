/**
 * Passwords are turned into the engine's own stored form here, before any SQL is sent: the
 * statement that sets a password then carries only what the engine would have stored anyway, so
 * an engine log line, a statistics view or a backup never shows the password itself.
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';

const SCRAM_ITERATIONS = 4096;

// RFC 4013 SASLprep, the parts that change real passwords: non-ASCII spaces become a space,
// "commonly mapped to nothing" characters vanish, then NFKC. PostgreSQL does the same to the
// password it is given (and uses it unchanged when the result has prohibited characters).
const NON_ASCII_SPACE = /[\u00A0\u1680\u2000-\u200B\u202F\u205F\u3000]/g;
const MAPPED_TO_NOTHING = new Set([0x00ad, 0x034f, 0x1806, 0x180b, 0x180c, 0x180d, 0x200b, 0x200c, 0x200d, 0x2060, 0xfeff]);
const isMappedToNothing = (cp: number) => MAPPED_TO_NOTHING.has(cp) || (cp >= 0xfe00 && cp <= 0xfe0f);
// eslint-disable-next-line no-control-regex
const PROHIBITED = /[\u0000-\u001F\u007F-\u009F\u06DD\u070F\u180E\u200E\u200F\u2028-\u202E\u2060-\u2063\u206A-\u206F\uFFF9-\uFFFC\uE000-\uF8FF]/;

function saslPrep(password: string): string {
  const mapped = [...password.replace(NON_ASCII_SPACE, ' ')]
    .filter((ch) => !isMappedToNothing(ch.codePointAt(0) as number))
    .join('')
    .normalize('NFKC');
  return PROHIBITED.test(mapped) ? password : mapped;
}

/** A PostgreSQL SCRAM-SHA-256 verifier (`SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>`). */
export function scramSha256Verifier(password: string, salt: Buffer = randomBytes(16)): string {
  const salted = pbkdf2Sync(Buffer.from(saslPrep(password), 'utf8'), salt, SCRAM_ITERATIONS, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${SCRAM_ITERATIONS}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/** A MariaDB/MySQL `mysql_native_password` hash (`*` + SHA1(SHA1(password)) in upper-case hex). */
export function mysqlNativePasswordHash(password: string): string {
  const inner = createHash('sha1').update(Buffer.from(password, 'utf8')).digest();
  return `*${createHash('sha1').update(inner).digest('hex').toUpperCase()}`;
}
