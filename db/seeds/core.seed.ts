import type { Knex } from 'knex';
import { hashPassword, verifyPassword } from '../../common/crypto';
import { DEFAULT_CAPABILITIES } from '../../domain/capabilities';

export interface DemoPasswords {
  owner: string;
  dev: string;
  /** The owner of the second account, `other@example.test`. */
  other: string;
}

/** The second account's owner (DECISIONS "Data planes ... Seed"): no services, to try isolation between accounts. */
export const OTHER_OWNER_EMAIL = 'other@example.test';

/** The non-owner's narrower permission set (DECISIONS "Seed": some scopes, some services). */
export const DEV_USER_SCOPES = [
  'services:read',
  'operations:read',
  'account:read',
  'apikeys:read',
  'apikeys:write',
  'vps:read',
  'vps:power',
  'dns:read',
  'dns:write',
  'orders:read',
];

/** One active service of every family, each with a label a person recognises. */
export const DEMO_SERVICES = [
  { family: 'vps', product: 'vps-s', name: 'VPS S', label: 'web-1.example.test', primary_ip: '203.0.113.10', dev: true },
  { family: 'vps', product: 'vps-container', name: 'Container VPS', label: 'ct-1.example.test', primary_ip: '203.0.113.11', dev: false },
  { family: 'dns', product: 'dns-zone', name: 'DNS Zone', label: 'example.test', primary_ip: null, dev: true },
  { family: 'dbaas', product: 'dbaas-postgres-s', name: 'Managed PostgreSQL S', label: 'db-1', primary_ip: '127.0.0.1', dev: false },
  { family: 'dbaas', product: 'dbaas-mysql-s', name: 'Managed MySQL S', label: 'db-2', primary_ip: '127.0.0.1', dev: false },
  { family: 'caas', product: 'caas-starter', name: 'Container Apps Starter', label: 'apps-1', primary_ip: '203.0.113.30', dev: false },
  { family: 'lb', product: 'lb-s', name: 'Load Balancer S', label: 'lb-1', primary_ip: '203.0.113.40', dev: false },
  { family: 'objectstorage', product: 'objectstorage-250', name: 'Object Storage 250 GB', label: 'storage', primary_ip: null, dev: false },
  { family: 'mailgateway', product: 'mailgateway-10k', name: 'Mail Gateway 10k', label: 'mail', primary_ip: null, dev: false },
  {
    family: 'other',
    productFamily: 'wordpress',
    product: 'wordpress-starter',
    name: 'WordPress Starter',
    label: 'blog.example.test',
    primary_ip: null,
    dev: false,
  },
  { family: 'other', product: 'images-basic', productFamily: 'images', name: 'Image Delivery Basic', label: 'images', primary_ip: null, dev: false },
] as const;

export interface SeedOutcome {
  createdUsers: boolean;
  /** Demo users whose password did not match the given one and was reset to it. */
  resetPasswords: string[];
}

/**
 * Account cus_1 with its owner, a narrower developer and one active service per family; and a
 * second account owned by `other@example.test` with no services, which orders from the same
 * catalog (and WELCOME100) like the first, so that isolation between accounts can be tried.
 * Idempotent: existing rows are kept, except the demo users' passwords, which are reset to the
 * given ones when they differ (a database seeded by another checkout, or by a run with other
 * DEMO_*_PASSWORD values), so that what `npm start` prints always works.
 */
export async function seedCore(db: Knex, passwords: DemoPasswords): Promise<SeedOutcome> {
  return db.transaction(async (trx) => {
    await trx('accounts')
      .insert({ id: 1, name: 'Demo Account', company: 'Example Ltd', email: 'owner@example.test', country: 'DE', currency: 'EUR' })
      .onConflict('id')
      .ignore();
    // The account's balance is kept by billing.
    await trx('billing_accounts').insert({ account_id: 1, credit: 5.0 }).onConflict('account_id').ignore();
    await trx.raw(`select setval(pg_get_serial_sequence('accounts', 'id'), greatest((select max(id) from accounts), 1))`);

    let createdUsers = false;
    const resetPasswords: string[] = [];
    const ensureUser = async (
      email: string,
      password: string,
      fields: { is_owner: boolean; scopes: string[]; all_services: boolean },
      accountId: () => Promise<number> = async () => 1,
    ) => {
      const existing = await trx('users').whereRaw('lower(email) = ?', [email]).first();
      if (existing) {
        if (!(await verifyPassword(password, existing.password_hash))) {
          await trx('users')
            .where({ id: existing.id })
            .update({ password_hash: await hashPassword(password) });
          resetPasswords.push(email);
        }
        return existing.id as number;
      }
      createdUsers = true;
      const [row] = await trx('users')
        .insert({ account_id: await accountId(), email, password_hash: await hashPassword(password), ...fields })
        .returning('id');
      return row.id as number;
    };
    await ensureUser('owner@example.test', passwords.owner, { is_owner: true, scopes: [], all_services: true });
    const devId = await ensureUser('dev@example.test', passwords.dev, { is_owner: false, scopes: DEV_USER_SCOPES, all_services: false });
    // The second account is the one its owner belongs to: made (with the same credit) only with its owner.
    await ensureUser(OTHER_OWNER_EMAIL, passwords.other, { is_owner: true, scopes: [], all_services: true }, async () => {
      const [account] = await trx('accounts')
        .insert({ name: 'Other Demo Account', company: 'Other Example Ltd', email: OTHER_OWNER_EMAIL, country: 'DE', currency: 'EUR' })
        .returning('id');
      await trx('billing_accounts').insert({ account_id: account.id, credit: 5.0 });
      return Number(account.id);
    });

    const today = new Date();
    const nextDue = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() + 1, 1)).toISOString().slice(0, 10);
    for (const svc of DEMO_SERVICES) {
      let row = await trx('services').where({ account_id: 1, label: svc.label, family: svc.family }).first();
      if (!row) {
        [row] = await trx('services')
          .insert({
            account_id: 1,
            family: svc.family,
            product: svc.product,
            product_family: 'productFamily' in svc ? svc.productFamily : null,
            status: 'active',
            name: svc.name,
            label: svc.label,
            primary_ip: svc.primary_ip,
            billing_cycle: 'monthly',
            next_due_date: nextDue,
            capabilities: JSON.stringify(
              svc.product === 'vps-container'
                ? { ...DEFAULT_CAPABILITIES.vps, console: true, reinstall: true }
                : (DEFAULT_CAPABILITIES['productFamily' in svc && svc.productFamily ? svc.productFamily : ''] ?? DEFAULT_CAPABILITIES[svc.family]),
            ),
          })
          .returning('*');
      }
      if (svc.dev) {
        await trx('user_service_permissions').insert({ user_id: devId, service_id: row.id }).onConflict(['user_id', 'service_id']).ignore();
      }
    }
    return { createdUsers, resetPasswords };
  });
}
