import type { Socket } from "node:net";
import { KeyedCounts } from "../keyed-counts";

/**
 * Raw TCP sockets allowed beyond the WebSocket caps: room for peers still in their HTTP upgrade, for
 * `/healthz`, and for refused peers while their close frame goes out. Past it a socket is dropped at
 * once, since there is no WebSocket yet to carry a close code.
 */
export const SOCKET_SLACK = 64;

/** The remote address a cap is counted on; IPv4-mapped IPv6 counts as its IPv4 address. */
export function peerAddress(socket: Socket): string {
  const address = socket.remoteAddress ?? "unknown";
  return address.startsWith("::ffff:") ? address.slice(7) : address;
}

/**
 * Counts connections per remote address at two levels: WebSocket peers (the caps a peer is told about
 * with close code 4004) and raw TCP sockets (a backstop against sockets that never upgrade).
 */
export class ConnectionCaps {
  private readonly socketsByAddress = new KeyedCounts();
  private readonly peersByAddress = new KeyedCounts();
  private peers = 0;

  constructor(
    readonly maxConnections: number,
    readonly maxConnectionsPerAddress: number,
  ) {}

  /** A new TCP socket: false when its address already holds too many (the caller drops it). */
  admitSocket(address: string): boolean {
    if (this.socketsByAddress.get(address) >= this.maxConnectionsPerAddress + SOCKET_SLACK) return false;
    this.socketsByAddress.add(address, 1);
    return true;
  }

  releaseSocket(address: string): void {
    this.socketsByAddress.add(address, -1);
  }

  /** A new WebSocket peer: the refusal reason (fits a close frame), or undefined once it is counted. */
  admitPeer(address: string): string | undefined {
    if (this.peers >= this.maxConnections)
      return `gateway connection limit reached (limits.maxConnections = ${this.maxConnections})`;
    if (this.peersByAddress.get(address) >= this.maxConnectionsPerAddress)
      return `too many connections from this address (limits.maxConnectionsPerAddress = ${this.maxConnectionsPerAddress})`;
    this.peers++;
    this.peersByAddress.add(address, 1);
    return undefined;
  }

  releasePeer(address: string): void {
    this.peers--;
    this.peersByAddress.add(address, -1);
  }

  get peerCount(): number {
    return this.peers;
  }
}
