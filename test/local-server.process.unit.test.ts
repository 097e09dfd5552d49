import { describe, expect, it } from 'vitest';
import { daemonEnded, spawnDetached, waitFor } from '../providers/local-server';

const endedOf = async (pid: number) => {
  let ended: string | null = null;
  await waitFor(async () => (ended = await daemonEnded(pid, 'never-matches')) !== null, 5_000, 10);
  return ended;
};

describe('daemonEnded', () => {
  it('says how a daemon started here ended: its exit code, or the signal that killed it', async () => {
    expect(await endedOf(await spawnDetached('/bin/sh', ['-c', 'exit 3']))).toBe('it exited with code 3');

    const sleeper = await spawnDetached('/bin/sleep', ['30']);
    // Running: not ended, although `matches` does not recognise it (the child's own exit is the truth).
    expect(await daemonEnded(sleeper, 'never-matches')).toBeNull();
    process.kill(sleeper, 'SIGKILL');
    expect(await endedOf(sleeper)).toBe('it was killed by SIGKILL');
  });

  it('judges a process it did not start by /proc: alive only while the pid is still that program', async () => {
    expect(await daemonEnded(process.pid, (args) => args.some((a) => a.includes('node')))).toBeNull();
    expect(await daemonEnded(process.pid, 'never-matches')).toBe('it exited');
  });
});
