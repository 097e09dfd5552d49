import { loadConfig } from '../common/config';
import { createDb } from '../db/knex';

/** `npm run migrate` (latest) or `npm run migrate -- down` (roll back the last batch). */
async function main() {
  const config = loadConfig();
  const db = createDb(config.DATABASE_URL);
  try {
    if (process.argv[2] === 'down') {
      const [batch, names] = await db.migrate.rollback();
      console.log(`rolled back batch ${batch}: ${names.join(', ') || 'nothing'}`);
    } else {
      const [batch, names] = await db.migrate.latest();
      console.log(names.length ? `migrated batch ${batch}: ${names.join(', ')}` : 'already up to date');
    }
  } finally {
    await db.destroy();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
