import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

/** A TCP relay between the browser and the gateway that can drop the browser's network for a while. */
export class Relay {
  server: Server;
  sockets = new Set<Socket>();
  down = false;
  port = 0;
  constructor(target: number) {
    this.server = createServer((inbound) => {
      if (this.down) {
        inbound.destroy();
        return;
      }
      const outbound = tcpConnect(target, "127.0.0.1");
      this.sockets.add(inbound);
      this.sockets.add(outbound);
      inbound.pipe(outbound);
      outbound.pipe(inbound);
      const end = () => {
        inbound.destroy();
        outbound.destroy();
        this.sockets.delete(inbound);
        this.sockets.delete(outbound);
      };
      inbound.on("error", end);
      outbound.on("error", end);
      inbound.on("close", end);
      outbound.on("close", end);
    });
  }
  async listen(): Promise<void> {
    await new Promise<void>((done) => this.server.listen(0, "127.0.0.1", done));
    this.port = (this.server.address() as { port: number }).port;
  }
  cut(): void {
    this.down = true;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }
  restore(): void {
    this.down = false;
  }
  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((done) => this.server.close(() => done()));
  }
}
