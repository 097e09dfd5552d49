import { defineBackend } from './backend';
import { WordpressSimulator } from './simulator/wordpress.simulator';
import type { WordpressProvider } from './wordpress.provider';
import { WordpressLocalProvider } from './wordpress/wordpress.local';

declare module './backend' {
  interface FamilyProviders {
    /** Hosted WordPress sites: real WordPress on this host's php-fpm and nginx (WORDPRESS_BACKEND=local), or the simulator. */
    wordpress: WordpressProvider;
  }
}

/** The hosted-WordPress family's backend. */
export const wordpressBackend = defineBackend<'wordpress', WordpressLocalProvider>({
  family: 'wordpress',
  key: 'wordpress',
  simulator: ({ db, config }) => new WordpressSimulator(db, config.SIM_DELAY_SCALE),
  real: {
    selected: (config) => config.WORDPRESS_BACKEND !== 'simulator',
    create: ({ config }) =>
      new WordpressLocalProvider({
        dataDir: config.WORDPRESS_DATA_DIR,
        bindAddress: config.WORDPRESS_BIND_ADDRESS,
        httpPort: config.WORDPRESS_HTTP_PORT,
        smtpRelay: config.WORDPRESS_SMTP_RELAY ?? null,
      }),
  },
});
