import type { Role } from "@switchboard/core";
import { WebSocket } from "ws";

export interface EventFrame {
  type: "event";
  event: string;
  seq: number;
  payload: Record<string, unknown>;
}

export interface ResponseFrame {
  type: "res";
  id: string | null;
  ok: boolean;
  result?: Record<string, unknown>;
  error?: { code: string; message: string; details?: unknown };
}

/**
 * A deliberately small raw-WebSocket peer for gateway tests: it speaks the wire protocol directly
 * (no SDK), so the tests pin the protocol itself.
 */
export class TestPeer {
  readonly events: EventFrame[] = [];
  readonly responses: ResponseFrame[] = [];
  private nextId = 1;
  private readonly pending = new Map<string, (frame: ResponseFrame) => void>();
  private readonly eventWaiters = new Set<() => void>();
  closed: { code: number; reason: string } | undefined;
  private readonly closedWaiters = new Set<() => void>();

  private constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      const frame = JSON.parse(String(data)) as EventFrame | ResponseFrame;
      if (frame.type === "event") {
        this.events.push(frame);
        for (const waiter of [...this.eventWaiters]) waiter();
      } else {
        this.responses.push(frame);
        const resolve = frame.id ? this.pending.get(frame.id) : undefined;
        if (resolve && frame.id) {
          this.pending.delete(frame.id);
          resolve(frame);
        }
      }
    });
    socket.on("close", (code, reason) => {
      this.closed = { code, reason: String(reason) };
      for (const waiter of [...this.closedWaiters]) waiter();
      for (const waiter of [...this.eventWaiters]) waiter();
    });
  }

  static async open(url: string): Promise<TestPeer> {
    const socket = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("error", reject);
    });
    return new TestPeer(socket);
  }

  static async connect(
    url: string,
    options: { token: string; role: Role; agents?: string[]; sessionKey?: string },
  ): Promise<TestPeer> {
    const peer = await TestPeer.open(url);
    await peer.handshake(options);
    return peer;
  }

  async handshake(options: {
    token: string;
    role: Role;
    agents?: string[];
    sessionKey?: string;
    /** A worker's announced concurrency. */
    concurrency?: number;
  }): Promise<void> {
    const response = await this.request("connect", {
      protocol: 1,
      client: { name: "test", version: "0" },
      auth: { token: options.token },
      role: options.role,
      ...(options.agents ? { agents: options.agents } : {}),
      ...(options.sessionKey ? { sessionKey: options.sessionKey } : {}),
      ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
    });
    if (!response.ok) throw new Error(`connect failed: ${response.error?.code} ${response.error?.message}`);
  }

  sendRaw(data: string | Buffer): void {
    this.socket.send(data);
  }

  request(method: string, params?: Record<string, unknown>): Promise<ResponseFrame> {
    const id = String(this.nextId++);
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.socket.send(JSON.stringify({ type: "req", id, method, ...(params ? { params } : {}) }));
    });
  }

  /** Calls a method and returns its result, throwing with the error code on failure. */
  async call<T = Record<string, unknown>>(method: string, params?: Record<string, unknown>): Promise<T> {
    const response = await this.request(method, params);
    if (!response.ok) {
      const error = new Error(
        `${method} failed: ${response.error?.code}: ${response.error?.message}`,
      ) as Error & { code?: string };
      error.code = response.error?.code;
      throw error;
    }
    return response.result as T;
  }

  /** Waits for the next event matching `predicate` (including ones already received after `fromIndex`). */
  async waitForEvent(
    predicate: (event: EventFrame) => boolean,
    timeoutMs = 5000,
    fromIndex = 0,
  ): Promise<EventFrame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.slice(fromIndex).find(predicate);
      if (found) return found;
      if (this.closed) throw new Error(`peer closed (${this.closed.code}) while waiting for an event`);
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error("timed out waiting for event");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, remaining);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.eventWaiters.add(done);
        setTimeout(() => this.eventWaiters.delete(done), remaining + 10);
      });
    }
  }

  waitClosed(timeoutMs = 5000): Promise<{ code: number; reason: string }> {
    if (this.closed) return Promise.resolve(this.closed);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("peer did not close")), timeoutMs);
      this.closedWaiters.add(() => {
        clearTimeout(timer);
        resolve(this.closed!);
      });
    });
  }

  close(): void {
    this.socket.close();
  }
}
