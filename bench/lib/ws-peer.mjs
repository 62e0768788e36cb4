// A minimal raw-protocol WebSocket peer (no SDK): `connect`, requests matched by id, events.
import { ws } from "./modules.mjs";

const { WebSocket } = ws;

export class Peer {
  constructor(socket) {
    this.socket = socket;
    this.nextId = 1;
    this.pending = new Map();
    this.eventHandlers = [];
    socket.on("message", (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === "event") {
        for (const handler of this.eventHandlers) handler(frame);
        return;
      }
      const resolve = frame.id != null ? this.pending.get(frame.id) : undefined;
      if (resolve) {
        this.pending.delete(frame.id);
        resolve(frame);
      }
    });
    socket.on("close", () => {
      for (const resolve of this.pending.values()) {
        resolve({ type: "res", ok: false, error: { code: "CLOSED", message: "connection closed" } });
      }
      this.pending.clear();
    });
  }

  static open(url) {
    const socket = new WebSocket(url, { perMessageDeflate: false });
    return new Promise((resolve, reject) => {
      socket.once("open", () => resolve(new Peer(socket)));
      socket.once("error", reject);
    });
  }

  /** Opens a connection and completes the `connect` handshake. */
  static async connect(url, { token, role = "operator", agents }) {
    const peer = await Peer.open(url);
    await peer.call("connect", {
      protocol: 1,
      client: { name: "switchboard-bench", version: "0" },
      auth: { token },
      role,
      ...(agents ? { agents } : {}),
    });
    return peer;
  }

  onEvent(handler) {
    this.eventHandlers.push(handler);
  }

  /** Sends a request; resolves with the whole response frame. */
  request(method, params) {
    const id = String(this.nextId++);
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.socket.send(JSON.stringify({ type: "req", id, method, ...(params ? { params } : {}) }));
    });
  }

  /** Sends a request; resolves with its result or throws with the error code. */
  async call(method, params) {
    const frame = await this.request(method, params);
    if (!frame.ok) {
      const error = new Error(`${method} failed: ${frame.error?.code}: ${frame.error?.message}`);
      error.code = frame.error?.code;
      throw error;
    }
    return frame.result;
  }

  close() {
    this.socket.close();
  }
}

/**
 * An agent worker that answers every run at once: skip tokens for reply-back and announce steps
 * (so the agent-to-agent background flow ends quickly), an echo otherwise.
 */
export async function startInstantWorker(url, token, agents) {
  const peer = await Peer.open(url);
  let runs = 0;
  peer.onEvent((frame) => {
    if (frame.event !== "run.assigned") return;
    runs += 1;
    const { runId, input } = frame.payload;
    const context = input?.context ?? "";
    let reply = `ok: ${input?.message ?? ""}`;
    if (context.includes("Agent-to-agent reply step")) reply = "REPLY_SKIP";
    else if (context.includes("announce step")) reply = "ANNOUNCE_SKIP";
    void peer.request("run.complete", { runId, reply });
  });
  await peer.call("connect", {
    protocol: 1,
    client: { name: "switchboard-bench-worker", version: "0" },
    auth: { token },
    role: "agent",
    agents,
  });
  return {
    peer,
    get runs() {
      return runs;
    },
    close: () => peer.close(),
  };
}
