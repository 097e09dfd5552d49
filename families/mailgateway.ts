import { mailGatewayRoutes } from '../api/routes/mailgateway/routes';
import { seedMailGateway } from '../db/seeds/mailgateway.seed';
import { mailEndpointOf, MailGatewayProvisioner } from '../domain/mailgateway/provisioner';
import { MailRetentionSweeper } from '../domain/mailgateway/retention';
import { defineFamily } from './manifest';

/**
 * Mail gateway (SPEC "Mail gateway"): the account's gateway, its sending domains and keys here.
 * docs/mailgateway.md.
 */
export const mailGatewayFamily = defineFamily({
  name: 'mailgateway',
  routes: mailGatewayRoutes,
  provisioner: ({ db, config }) => new MailGatewayProvisioner(db, mailEndpointOf(config)),
  // Messages are kept 90 days.
  keepers: ({ db, logger }) => [new MailRetentionSweeper({ db, logger })],
  seed: ({ db, keyring, providers, config }) => seedMailGateway(db, keyring, providers, config),
  config: [
    'MAIL_PORT',
    'MAIL_API_ENDPOINT',
    'MAIL_DATA_DIR',
    'MAIL_SMTP_PORT',
    'MAIL_SMTP_HOST',
    'MAIL_SMARTHOST',
    'MAIL_MX_HOST',
    'MAIL_BOUNCE_RATE_LIMIT',
    'MAIL_COMPLAINT_RATE_LIMIT',
    'MAIL_SUSPEND_MIN_SENDS',
    'DNS_RESOLVER',
  ],
});
