import net from "node:net";

/**
 * Test helper (this package's fault suites and the gateway's cluster tests): a TCP forwarder in front
 * of the test server, to make "the database went away" happen without touching the real server
 * (other suites share it): `stop` closes the port and cuts every open connection, `start` listens on
 * the same port again. `stall` makes it go silent instead: nothing is forwarded any more and nothing
 * is closed (a network that drops packets, or a frozen server), until `stop`.
 */
export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private stalled = false;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<number> {
    const server = net.createServer((inbound) => {
      const outbound = net.connect(this.targetPort, this.targetHost);
      for (const socket of [inbound, outbound]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => {
          inbound.destroy();
          outbound.destroy();
        });
      }
      const pair: [net.Socket, net.Socket] = [inbound, outbound];
      this.pairs.add(pair);
      inbound.on("close", () => this.pairs.delete(pair));
      if (this.stalled) {
        inbound.pause();
        outbound.pause();
        return;
      }
      inbound.pipe(outbound);
      outbound.pipe(inbound);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
    return this.port;
  }

  /**
   * Stops forwarding both ways and keeps every connection open, new ones too: no answer and no
   * error reach the client (it notices only by its own timeouts). `stop` ends it.
   */
  stall(): void {
    this.stalled = true;
    for (const [inbound, outbound] of this.pairs) {
      inbound.unpipe(outbound);
      outbound.unpipe(inbound);
      inbound.pause();
      outbound.pause();
    }
  }

  /** Refuses new connections and resets the open ones, as a server that died would. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.stalled = false;
    this.pairs.clear();
    for (const socket of this.sockets) socket.resetAndDestroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The URL of `url` pointed at this proxy. */
  urlFor(url: string): string {
    const parsed = new URL(url);
    parsed.hostname = "127.0.0.1";
    parsed.port = String(this.port);
    return parsed.toString();
  }
}

/** A local port nobody listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
