import type { Knex } from 'knex';

/**
 * DNS zones.
 *
 * Control plane (what the zones list is served from): `dns_zones`, the zone each dns service owns
 * (one per service; a name is held by one service at a time, released when the zone is torn down),
 * with the kind and name servers last seen on the server.
 *
 * DNS server simulator (providers/simulator/dns.simulator.ts), standing in for PowerDNS when
 * DNS_BACKEND=simulator: zones with their SOA fields and serial, and their RRsets (every record of
 * one name and type, values in presentation form).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('dns_zones', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('name').notNullable().unique(); // absolute, lower case, punycode, no trailing dot
    t.text('kind').notNullable().defaultTo('native');
    t.specificType('nameservers', 'text[]').notNullable().defaultTo('{}');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('sim_dns_zones', (t) => {
    t.text('name').primary(); // absolute, lower case, no trailing dot
    t.text('kind').notNullable().defaultTo('native');
    t.bigInteger('serial').notNullable();
    t.text('soa_mname').notNullable(); // host names with the trailing dot
    t.text('soa_rname').notNullable();
    t.integer('soa_ttl').notNullable();
    t.integer('soa_refresh').notNullable();
    t.integer('soa_retry').notNullable();
    t.integer('soa_expire').notNullable();
    t.integer('soa_minimum').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('sim_dns_rrsets', (t) => {
    t.text('zone').notNullable().references('sim_dns_zones.name').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('type').notNullable();
    t.integer('ttl').notNullable();
    t.specificType('values', 'text[]').notNullable();
    t.primary(['zone', 'name', 'type']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['sim_dns_rrsets', 'sim_dns_zones', 'dns_zones']) await knex.schema.dropTableIfExists(table);
}
