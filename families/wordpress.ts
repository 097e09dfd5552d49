import { createWordpressActivities } from '../activities/wordpress/activities';
import { createRecipeApplyActivities } from '../activities/wordpress/recipe-apply.activities';
import { wordpressDevRoutes } from '../api/routes/wordpress/dev.routes';
import { wordpressRoutes } from '../api/routes/wordpress/routes';
import { seedWordpress } from '../db/seeds/wordpress.seed';
import { WordpressBackupScheduler } from '../domain/wordpress/backup-scheduler';
import { WordpressKeeper } from '../domain/wordpress/keeper';
import { WordpressProvisioner } from '../domain/wordpress/provisioner';
import { wordpressBackend } from '../providers/wordpress.backend';
import { defineFamily } from './manifest';

/**
 * Hosted WordPress sites (SPEC "Hosted sites"): real WordPress on this host's php-fpm (a master and
 * pool per site, as the site's own OS account), nginx by Host, and a MariaDB instance of the
 * platform per site; recipes, backups and restores as workflows. docs/wordpress.md.
 */
export const wordpressFamily = defineFamily({
  name: 'wordpress',
  routes: wordpressRoutes,
  devRoutes: wordpressDevRoutes,
  backend: wordpressBackend,
  provisioner: ({ db, providers, keyring }) => new WordpressProvisioner(db, providers, keyring),
  // The seeded site of the demo account (blog.example.test), built as an order builds it.
  seed: ({ db, providers, keyring }) => seedWordpress(db, providers, keyring),
  // Backups and restores (and their steps in other workflows), and the recipe apply's steps.
  activities: (deps) => ({ ...createWordpressActivities(deps), ...createRecipeApplyActivities(deps) }),
  workflows: 'workflows/wordpress',
  keepers: ({ db, providers, logger, config, temporal }) => [
    // Every site's PHP and the sites' nginx, again after a restart; repairs recorded for monitoring/recovery.
    new WordpressKeeper({ db, providers, logger, intervalMs: config.WORDPRESS_KEEPER_INTERVAL }),
    // Daily scheduled backups of the sites that have them on, and their retention.
    new WordpressBackupScheduler({ db, temporal, logger, dataDir: config.WORDPRESS_DATA_DIR, intervalMs: config.WORDPRESS_BACKUP_SCHEDULE_INTERVAL }),
  ],
  config: [
    'WORDPRESS_BACKEND',
    'WORDPRESS_DATA_DIR',
    'WORDPRESS_BIND_ADDRESS',
    'WORDPRESS_HTTP_PORT',
    'WORDPRESS_SMTP_RELAY',
    'WORDPRESS_KEEPER_INTERVAL',
    'WORDPRESS_BACKUP_SCHEDULE_INTERVAL',
  ],
});
