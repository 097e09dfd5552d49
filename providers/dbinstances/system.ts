/**
 * The operating-system side of running database servers on this machine. The process plumbing
 * (commands, detached servers, pidfiles, ports, locks, logs, data directories) is the local-server
 * kit's (providers/local-server/), re-exported here for the engines; what is the database servers'
 * own stays: the account an instance from before accounts runs as.
 *
 * Nothing here ever receives a password: secrets go to the engines over their sockets.
 */
import os from 'node:os';
import { run, runningAsRoot } from '../local-server';

export {
  chownTree,
  CommandError,
  exists,
  freeLoopbackPort,
  killProcessesOf,
  ownedDirectory,
  portInUse,
  processAlive,
  readPidFile,
  run,
  runningAsRoot,
  sleep,
  spawnDetached,
  tailLines,
  waitFor,
  withFileLock,
  type RunOptions,
} from '../local-server';

export interface Account {
  name: string;
  uid: number;
  gid: number;
}

/** Who this process is. */
export function currentAccount(): Account {
  const info = os.userInfo();
  return { name: info.username, uid: info.uid, gid: info.gid };
}

/**
 * The account a database server runs as: the named system account when this process is root
 * (PostgreSQL refuses to run as root, and neither server should), else this process's own.
 */
export async function serverAccount(name: string): Promise<Account> {
  if (!runningAsRoot()) return currentAccount();
  const { stdout } = await run('getent', ['passwd', name]).catch(() => {
    throw new Error(`system account "${name}" is missing (scripts/install/dbaas.sh creates it with the packages)`);
  });
  const [, , uid, gid] = stdout.trim().split(':');
  return { name, uid: Number(uid), gid: Number(gid) };
}
