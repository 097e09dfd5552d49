/**
 * The engine's podman configuration, written into its data directory at every start
 * (docs/research/caas-podman.md §1): with it, images, containers, networks, events and podman's
 * temporary files all live under `<dataDir>`, and nothing is read from /etc/containers. The settings
 * are the ones this host needs: runc (crun refuses the hybrid cgroup layout), cgroupfs (no systemd
 * here), ulimits podman can set (its defaults fail with EPERM), the k8s-file log driver (what
 * `podman logs` reads), netavark.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { makeDirectory, withFileLock } from '../local-server';
import { podmanFiles, type PodmanFiles } from './podman';

/** The biggest container log kept (conmon truncates it past this; podman 4.3 does not rotate). */
export const LOG_SIZE_MAX = 16 * 1024 * 1024;

export interface DataDirLayout extends PodmanFiles {
  dataDir: string;
  root: string;
  run: string;
  networks: string;
  eventsLog: string;
}

export function layoutOf(dataDir: string): DataDirLayout {
  return {
    ...podmanFiles(dataDir),
    dataDir,
    root: path.join(dataDir, 'root'),
    run: path.join(dataDir, 'run'),
    networks: path.join(dataDir, 'networks'),
    eventsLog: path.join(dataDir, 'events.log'),
  };
}

/** TOML strings: the data directory's path is the only value that is not a constant. */
const toml = (value: string) => JSON.stringify(value);

export function containersConf(layout: DataDirLayout): string {
  return `# Written by the CaaS engine (providers/podman/config.ts) at every start; edits are lost.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
log_driver = "k8s-file"
log_size_max = ${LOG_SIZE_MAX}
# The image's /etc/hosts, not the host's: the host's own names are none of an app's business.
base_hosts_file = "image"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = ${toml(layout.eventsLog)}
tmp_dir = ${toml(layout.tmpDir)}

[network]
network_backend = "netavark"
network_config_dir = ${toml(layout.networks)}
`;
}

export function storageConf(layout: DataDirLayout): string {
  return `# Written by the CaaS engine (providers/podman/config.ts) at every start; edits are lost.
[storage]
driver = "overlay"
graphroot = ${toml(layout.root)}
runroot = ${toml(layout.run)}
`;
}

/** No registry: short names never resolve to one, and nothing is ever pulled. */
export const REGISTRIES_CONF = `# Written by the CaaS engine (providers/podman/config.ts): images are built locally, never pulled.
unqualified-search-registries = []
short-name-mode = "enforcing"
`;

async function writeIfChanged(file: string, text: string): Promise<void> {
  const current = await fs.readFile(file, 'utf8').catch(() => null);
  if (current === text) return;
  const temp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(temp, text, { mode: 0o600 });
  await fs.rename(temp, file);
}

async function currentBootId(): Promise<string> {
  return (await fs.readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => 'unknown')).trim();
}

/**
 * podman expects its runroot and tmp_dir on a tmpfs: it finds out that the host restarted from the
 * files there being gone, and only then resets the containers it believed running. Here both are in
 * the data directory, so the engine does the tmpfs's part: when the boot id it noted differs from
 * the current one, it empties them before any podman call of this boot.
 */
async function forgetPreviousBoot(layout: DataDirLayout): Promise<void> {
  const noted = path.join(layout.dataDir, 'boot-id');
  const boot = await currentBootId();
  const previous = (await fs.readFile(noted, 'utf8').catch(() => '')).trim();
  if (previous && previous !== boot) {
    await fs.rm(layout.run, { recursive: true, force: true });
    await fs.rm(layout.tmpDir, { recursive: true, force: true });
  }
  if (previous !== boot) await writeIfChanged(noted, `${boot}\n`);
}

/** Makes the data directory ready for podman: its folders and configuration, after a reboot's clean-up. */
export async function prepareDataDir(layout: DataDirLayout): Promise<void> {
  await makeDirectory(layout.dataDir, 0o700);
  await withFileLock(path.join(layout.dataDir, 'config.lock'), async () => {
    await forgetPreviousBoot(layout);
    for (const dir of [layout.root, layout.run, layout.networks, layout.tmpDir]) await makeDirectory(dir, 0o700);
    await writeIfChanged(layout.containersConf, containersConf(layout));
    await writeIfChanged(layout.storageConf, storageConf(layout));
    await writeIfChanged(layout.registriesConf, REGISTRIES_CONF);
  });
}
