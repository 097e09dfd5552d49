import { readdir, readFile } from 'node:fs/promises';

/** Whether a test suite (vitest) runs on this machine now: its timings would share the cores with a bench's. */
export async function vitestRunning(): Promise<boolean> {
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes('vitest')) return true;
  }
  return false;
}

/** Looks for a test suite every 5 s while the bench runs, so that the results say whether one ran beside it. */
export function watchForSuites(): { stop(): string } {
  let seen = 0;
  let looks = 0;
  const timer = setInterval(() => {
    void vitestRunning().then((running) => {
      looks++;
      if (running) seen++;
    });
  }, 5_000);
  return {
    stop() {
      clearInterval(timer);
      return `a test suite (vitest) was running in ${seen} of ${looks} looks, every 5 s`;
    },
  };
}
