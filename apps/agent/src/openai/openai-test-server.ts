import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A real HTTP server on 127.0.0.1 that speaks the Chat Completions API as scripted by a test: each
 * request is answered by the next queued responder, and every request is recorded.
 */
export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

export type Responder = (response: ServerResponse, request: RecordedRequest) => void | Promise<void>;

export interface OpenAITestServer {
  baseUrl: string;
  requests: RecordedRequest[];
  enqueue(...responders: Responder[]): void;
  close(): Promise<void>;
}

export async function startOpenAITestServer(): Promise<OpenAITestServer> {
  const queue: Responder[] = [];
  const requests: RecordedRequest[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const recorded: RecordedRequest = {
      method: req.method ?? "",
      path: req.url ?? "",
      headers: req.headers,
      body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
    };
    requests.push(recorded);
    const responder = queue.shift();
    if (!responder) {
      sendJson(500, { error: { message: "test server: no response queued" } })(res, recorded);
      return;
    }
    await responder(res, recorded);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    enqueue: (...responders) => queue.push(...responders),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function sendJson(status: number, body: unknown, headers: Record<string, string> = {}): Responder {
  return (res) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  };
}

export function sendRaw(status: number, body: string, contentType = "application/json"): Responder {
  return (res) => {
    res.writeHead(status, { "content-type": contentType });
    res.end(body);
  };
}

/** Streams the events as SSE, each `data:` line in its own write, then `[DONE]` unless told not to. */
export function sendStream(
  events: (object | string)[],
  options: { done?: boolean; hang?: boolean } = {},
): Responder {
  return async (res) => {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const event of events) {
      res.write(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (options.hang) return; // leaves the response open, like a server that stalls mid-stream
    if (options.done !== false) res.write("data: [DONE]\n\n");
    res.end();
  };
}

/**
 * Writes the body piece by piece, waiting whenever the socket is full, and stops quietly once the
 * client hangs up (as the provider does when a response goes past its limit).
 */
export function sendPieces(
  pieces: Iterable<string | Uint8Array>,
  contentType = "text/event-stream",
  status = 200,
): Responder {
  return async (res) => {
    res.on("error", () => {});
    res.writeHead(status, { "content-type": contentType });
    for (const piece of pieces) {
      if (res.destroyed) return;
      if (!res.write(piece)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off("drain", done);
            res.off("close", done);
            resolve();
          };
          res.on("drain", done);
          res.on("close", done);
        });
      }
    }
    if (!res.destroyed) res.end();
  };
}

export function completion(message: { content?: string | null; tool_calls?: unknown[] }, usage?: object) {
  return {
    id: "chatcmpl-test",
    object: "chat.completion",
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: null, ...message },
        finish_reason: message.tool_calls ? "tool_calls" : "stop",
      },
    ],
    ...(usage ? { usage } : {}),
  };
}

export function textDelta(content: string, finish?: string) {
  return { choices: [{ index: 0, delta: { content }, finish_reason: finish ?? null }] };
}

export function toolCallDelta(
  index: number,
  piece: { id?: string; name?: string; arguments?: string },
  finish?: string,
) {
  const call: Record<string, unknown> = { index, function: {} };
  if (piece.id) {
    call.id = piece.id;
    call.type = "function";
  }
  if (piece.name) (call.function as Record<string, unknown>).name = piece.name;
  if (piece.arguments !== undefined) (call.function as Record<string, unknown>).arguments = piece.arguments;
  return { choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: finish ?? null }] };
}

export function finishDelta(reason: string) {
  return { choices: [{ index: 0, delta: {}, finish_reason: reason }] };
}
