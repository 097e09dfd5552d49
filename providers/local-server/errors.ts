/**
 * The one error the local-server kit throws for a machine that is not ready for a server: what went
 * wrong and what to do about it, both in the message, so that whoever reads only one line (a seed's
 * output, an activity's failure in the Temporal UI) knows the fix.
 */
export class LocalServerError extends Error {
  constructor(
    /** What is wrong, naming the file, directory, binary or account concerned. */
    readonly reason: string,
    /** What to run or set to fix it. */
    readonly fix: string,
  ) {
    super(`${reason}. Fix: ${fix}`);
    this.name = 'LocalServerError';
  }
}
