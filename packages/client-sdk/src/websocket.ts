/**
 * The part of the WHATWG WebSocket API the client uses. The `ws` package (the default) and the
 * browser / Node 22 global `WebSocket` both satisfy it, so either can be injected.
 */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open", listener: () => void): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string }) => void): void;
  addEventListener(type: "error", listener: (event: unknown) => void): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export const SOCKET_OPEN = 1;
export const SOCKET_CLOSING = 2;

/** `ws` sockets expose ping frames and a hard `terminate`; browser sockets expose neither. */
interface NodeSocketExtras {
  on(event: "ping", listener: () => void): unknown;
  terminate(): void;
}

export function hasPingEvents(socket: WebSocketLike): socket is WebSocketLike & Pick<NodeSocketExtras, "on"> {
  return typeof (socket as Partial<NodeSocketExtras>).on === "function";
}

/**
 * Drops a socket without waiting for the closing handshake: a peer that stopped answering would
 * otherwise hold `close()` open for the library's closing timeout (30 s in `ws`).
 */
export function dropSocket(socket: WebSocketLike, code = 1000, reason = ""): void {
  const terminate = (socket as Partial<NodeSocketExtras>).terminate;
  try {
    if (typeof terminate === "function") terminate.call(socket);
    else socket.close(code, reason);
  } catch {
    // Already closed or never opened: nothing left to release.
  }
}

const decoder = new TextDecoder();

/** Text of a received message whatever container the implementation delivered it in. */
export function messageText(data: unknown): string | undefined {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer) return decoder.decode(data);
  if (data instanceof Uint8Array) return decoder.decode(data);
  // `ws` delivers a fragmented binary message as a list of Buffers.
  if (Array.isArray(data) && data.every((part) => part instanceof Uint8Array)) {
    return data.map((part: Uint8Array) => decoder.decode(part, { stream: true })).join("") + decoder.decode();
  }
  return undefined;
}

/** A readable line out of whatever an implementation passes to its `error` listeners. */
export function describeSocketError(event: unknown): string | undefined {
  if (event instanceof Error) return event.message;
  if (typeof event === "object" && event !== null) {
    const { message, error } = event as { message?: unknown; error?: unknown };
    if (typeof message === "string" && message !== "") return message;
    if (error instanceof Error) return error.message;
  }
  return undefined;
}
