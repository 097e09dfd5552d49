/**
 * Coalesces the hot reads of concurrent requests into one statement per turn of the event loop:
 * each `load(key)` made while handling the requests that arrived together is answered by one
 * query for all of their keys (an `unnest(...) with ordinality` join, rows tagged with the key's
 * position). One round trip to PostgreSQL instead of one per request: the sends and receives of
 * those round trips were a third of the API's CPU on its hottest reads (docs/benchmarks.md).
 *
 * Freshness is that of a query per request: a batch is sent after every request in it arrived, so
 * a read still sees everything committed before its request came in (read-your-writes holds).
 */
export class ReadBatcher<K, R> {
  private queue: Array<{ key: K; resolve: (rows: R[]) => void; reject: (err: unknown) => void }> = [];
  private scheduled = false;
  private inFlight = 0;

  /**
   * `run` answers a batch: for every row, the 0-based position of the key it belongs to. It runs
   * once per turn of the event loop that had loads, after the requests of that turn were parsed.
   */
  constructor(
    private readonly run: (keys: K[]) => Promise<Array<{ n: number; row: R }>>,
    /**
     * Batches of this reader in flight at once. Loads that arrive while they are all out wait for
     * the first to return and go together in the next batch: under load the batches grow instead of
     * queueing for pool connections (which the audit writer and the rate limiter need too).
     */
    private readonly maxInFlight = 4,
  ) {}

  load(key: K): Promise<R[]> {
    return new Promise((resolve, reject) => {
      this.queue.push({ key, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    if (this.queue.length === 0 || this.inFlight >= this.maxInFlight) return;
    this.inFlight++;
    const batch = this.queue;
    this.queue = [];
    this.run(batch.map((b) => b.key))
      .then(
        (rows) => {
          const results: R[][] = batch.map(() => []);
          for (const { n, row } of rows) results[n]?.push(row);
          batch.forEach((b, i) => b.resolve(results[i]));
        },
        (err) => {
          for (const b of batch) b.reject(err);
        },
      )
      .finally(() => {
        this.inFlight--;
        this.flush();
      });
  }
}
