import type { WebSocketConstructor } from "@switchboard/client";
import { WebSocket } from "ws";

export type SentFrame = { id?: string; method?: string; params?: Record<string, unknown> };

/**
 * A `ws` WebSocket for the SDK that the test controls from the client's side: it records each
 * socket and the frames it sent, can drop a live socket, sends new attempts to a closed port while
 * `blocked` (the client stays away exactly as long as the test wants), goes deaf while `frozen`
 * (incoming messages and pings swallowed, as on a half-open connection), and with
 * `dropAfterHandshake` drops each socket right after its first incoming message.
 */
export interface SocketControl {
  blocked: boolean;
  frozen: boolean;
  dropAfterHandshake: boolean;
  /** Sockets made, attempts to the closed port included. */
  constructed: number;
  sockets: WebSocket[];
  sent: Map<WebSocket, SentFrame[]>;
  WebSocket: WebSocketConstructor;
  /** Frames the n-th live socket sent. */
  frames(index: number): SentFrame[];
  drop(index?: number): void;
}

export function controlledSockets(): SocketControl {
  const control: SocketControl = {
    blocked: false,
    frozen: false,
    dropAfterHandshake: false,
    constructed: 0,
    sockets: [],
    sent: new Map(),
    WebSocket: undefined as unknown as WebSocketConstructor,
    frames(index) {
      const socket = control.sockets[index];
      return socket ? (control.sent.get(socket) ?? []) : [];
    },
    drop(index = control.sockets.length - 1) {
      control.sockets[index]?.terminate();
    },
  };
  class ControlledWebSocket extends WebSocket {
    constructor(url: string) {
      super(control.blocked ? "ws://127.0.0.1:1" : url);
      control.constructed += 1;
      if (control.blocked) return;
      control.sockets.push(this);
      const frames: SentFrame[] = [];
      control.sent.set(this, frames);
      const send = this.send.bind(this);
      this.send = ((data: string) => {
        frames.push(JSON.parse(data));
        send(data);
      }) as WebSocket["send"];
      if (control.dropAfterHandshake) {
        this.once("message", () => setImmediate(() => this.terminate()));
      }
    }
    override emit(event: string | symbol, ...args: unknown[]): boolean {
      if (control.frozen && (event === "message" || event === "ping")) return false;
      return super.emit(event, ...args);
    }
  }
  control.WebSocket = ControlledWebSocket as unknown as WebSocketConstructor;
  return control;
}
