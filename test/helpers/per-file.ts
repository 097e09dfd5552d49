import { afterAll, inject } from 'vitest';
import { forgetLocalPorts, registeredLocalPorts } from '../../common/platform-ports';
import { useTemplateDatabase } from './db';

/**
 * Runs before each test file of the `stack` and `real` tiers (vitest `setupFiles`), in a worker
 * process that runs file after file (vitest.config.mts): each file's database is cloned from the
 * run's migrated template, and the ports a file's servers registered as the platform's are
 * forgotten when the file ends, as a process of its own would have.
 */
useTemplateDatabase(inject('templateDatabase'));

const before = new Set(registeredLocalPorts());
afterAll(() => forgetLocalPorts(registeredLocalPorts().filter((port) => !before.has(port))));
