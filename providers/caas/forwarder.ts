import net from 'node:net';

/**
 * TCP forwarders of this process: a listener on a service network's gateway that passes each
 * connection on to a server of this host the service's containers cannot reach themselves (a
 * database instance on loopback). One per (listen address, port); a port another process of this
 * host already forwards (EADDRINUSE) is left to it.
 */
export class Forwarders {
  private readonly servers = new Map<string, net.Server>();

  private readonly pending = new Set<string>();

  /**
   * Forwards `listen` to `target`. A network's gateway address exists only while its bridge does,
   * which netavark makes with the network's first container: until then (EADDRNOTAVAIL) the listener
   * is tried again every half second for two minutes, in the background.
   */
  async ensure(listen: { host: string; port: number }, target: { host: string; port: number }): Promise<void> {
    const key = `${listen.host}:${listen.port}`;
    if (this.servers.has(key) || this.pending.has(key)) return;
    if ((await this.listen(key, listen, target)) !== 'not-yet') return;
    this.pending.add(key);
    const until = Date.now() + 120_000;
    const retry = setInterval(() => {
      void this.listen(key, listen, target).then((state) => {
        if (state === 'not-yet' && Date.now() < until) return;
        clearInterval(retry);
        this.pending.delete(key);
      });
    }, 500);
    retry.unref();
  }

  private async listen(
    key: string,
    listen: { host: string; port: number },
    target: { host: string; port: number },
  ): Promise<'listening' | 'elsewhere' | 'not-yet'> {
    const server = net.createServer((client) => {
      const upstream = net.connect({ host: target.host, port: target.port });
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
      client.setTimeout(3_600_000, close);
      client.pipe(upstream).pipe(client);
    });
    const state = await new Promise<'listening' | 'elsewhere' | 'not-yet'>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EADDRINUSE') resolve('elsewhere');
        else if (err.code === 'EADDRNOTAVAIL') resolve('not-yet');
        else reject(err);
      });
      server.listen(listen.port, listen.host, () => {
        this.servers.set(key, server);
        resolve('listening');
      });
    });
    server.unref();
    return state;
  }

  async closeAll(): Promise<void> {
    for (const server of this.servers.values()) await new Promise((r) => server.close(r));
    this.servers.clear();
  }
}
