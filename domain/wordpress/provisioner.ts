import type { Knex } from 'knex';
import { randomBase62, type Keyring } from '../../common/crypto';
import type { Providers } from '../../providers';
import { placeIfHosted } from '../hosts/directory';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { lockHostNames } from '../orders/store';
import { findSite, isApex } from './store';

/**
 * Builds an ordered hosted site (`wordpress-starter` with `site_name`): a MariaDB instance of the
 * platform for it (a DBaaS instance `svc-<n>-wp`, TLS required) with a database and a user of the
 * site's own, then the site on the WordPress backend (files, account, PHP, install, nginx), and the
 * records of both. The order succeeds once the site answers HTTP (`isActive`). Termination removes
 * the site, its database instance, its backups and its records.
 */
export const DB_PASSWORD_PURPOSE = 'wordpress-database-password';
const DB_ADMIN = 'wpadmin';

export class WordpressProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly providers: Providers,
    private readonly keyring: Keyring,
  ) {}

  async provision(service: ProvisionTarget): Promise<void> {
    const name = (service.label ?? '').toLowerCase().replace(/\.$/, '');
    if (!name) throw new Error(`service ${service.id} has no site name`);
    const phpVersion = typeof service.options.php_version === 'string' ? service.options.php_version : (await this.providers.wordpress.phpVersions()).at(-1)!;
    // The name first (refused if another site serves it), the record (passwords chosen once:
    // activities retry), then the servers.
    await this.claimPlatformName(service.id, name);
    await this.db('wordpress_sites')
      .insert({
        service_id: service.id,
        name,
        db_instance: `svc-${service.id}-wp`,
        db_name: `wp_${service.id}`,
        db_user: `wp_${service.id}`,
        db_password_sealed: this.keyring.encrypt(DB_PASSWORD_PURPOSE, randomBase62(32)),
        db_admin_password_sealed: this.keyring.encrypt(DB_PASSWORD_PURPOSE, randomBase62(32)),
        php_version: phpVersion,
      })
      .onConflict('service_id')
      .ignore();
    const site = (await findSite(this.db, service.id))!;
    const password = this.keyring.decrypt(DB_PASSWORD_PURPOSE, site.db_password_sealed);
    await placeIfHosted(this.db, this.providers.hosts, 'dbaas', service.id);
    await this.providers.dbaas.createInstance({
      name: site.db_instance,
      serviceId: service.id,
      engine: 'mysql',
      adminUsername: DB_ADMIN,
      adminPassword: this.keyring.decrypt(DB_PASSWORD_PURPOSE, site.db_admin_password_sealed),
    });
    const users = await this.providers.dbaas.listUsers(site.db_instance);
    if (users.some((u) => u.username === site.db_user)) await this.providers.dbaas.setPassword(site.db_instance, { username: site.db_user }, password);
    else await this.providers.dbaas.createUser(site.db_instance, { username: site.db_user, password });
    const databases = await this.providers.dbaas.listDatabases(site.db_instance);
    if (!databases.some((d) => d.name === site.db_name)) {
      await this.providers.dbaas.createDatabase(site.db_instance, {
        name: site.db_name,
        owner: site.db_user,
        charset: 'utf8mb4',
        collation: 'utf8mb4_unicode_ci',
      });
    }
    const info = await this.providers.dbaas.connectionInfo(site.db_instance);
    const owner = await this.db('users')
      .where({ account_id: service.accountId })
      .orderBy([{ column: 'is_owner', order: 'desc' }, 'id'])
      .first();
    const address = await this.providers.wordpress.createSite({
      serviceId: service.id,
      hostname: name,
      title: name,
      adminEmail: owner?.email ?? `admin@${name}`,
      phpVersion,
      database: { host: info.host, port: info.port, name: site.db_name, user: site.db_user, password, caCertificate: info.caCertificate },
    });
    await this.db('wordpress_sites').where({ service_id: service.id }).update({ ip: address.ip, http_port: address.httpPort });
    await this.db('services').where({ id: service.id }).update({ primary_ip: address.ip });
  }

  /**
   * The site's platform row, under the name's advisory locks (domain/orders/store.ts lockHostNames).
   * The order held the name since it was placed, so a name another site serves by now (its domain,
   * or the `www.` form of its apex custom domain) is a race that lost: the build stops with an error
   * rather than share a host name. A retry finds its own row and goes on.
   */
  private async claimPlatformName(serviceId: number, name: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      await lockHostNames(trx, [name]);
      const apexOfWww = name.startsWith('www.') && isApex(name.slice(4)) ? name.slice(4) : null;
      const rows = await trx('wordpress_domains').whereIn('domain', apexOfWww ? [name, apexOfWww] : [name]);
      const own = rows.find((r) => r.domain === name && Number(r.service_id) === serviceId);
      const other = rows.find((r) => Number(r.service_id) !== serviceId && (r.domain === name || !r.platform));
      if (other) {
        throw new Error(
          `site name ${name} of service ${serviceId} is already served by service ${other.service_id} (domain ${other.domain}); the name was taken after the order was checked`,
        );
      }
      if (!own) await trx('wordpress_domains').insert({ service_id: serviceId, domain: name, platform: true, primary: true });
    });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    const site = await findSite(this.db, service.id);
    if (!site?.ip) return false;
    return (await this.providers.wordpress.live(service.id)).state === 'up';
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    await this.providers.wordpress.destroySite(service.id);
    const site = await findSite(this.db, service.id);
    if (site) await this.providers.dbaas.destroyInstance(site.db_instance);
    const backups: Array<{ path: string | null }> = await this.db('wordpress_backups').where({ service_id: service.id });
    const { rm } = await import('node:fs/promises');
    for (const b of backups) if (b.path) await rm(b.path, { force: true });
    await this.db('wordpress_backups').where({ service_id: service.id }).delete();
    await this.db('wordpress_domains').where({ service_id: service.id }).delete();
    await this.db('wordpress_recipe_secrets').where({ service_id: service.id }).delete();
    await this.db('wordpress_sites').where({ service_id: service.id }).delete();
  }
}
