import {
  type ErrorCode,
  type OpenAIModelConfig,
  OpenAIModelConfigSchema,
  SwitchboardError,
  type Usage,
} from "@switchboard/core";
import type { z } from "zod";
import { type AgentLogger, silentLogger } from "../logger";
import { abortableSleep } from "../model/abortable-sleep";
import type { ModelProvider, ModelRequest, ModelToolCall, ModelTurn } from "../model/model-types";
import {
  CompletionSchema,
  errorBodyMessage,
  parseToolArguments,
  StreamChunkSchema,
  toOpenAIMessages,
  toOpenAITools,
  toUsage,
} from "./openai-wire";
import { cappedChunks, ResponseTooLargeError, readTextCapped, readTextPrefix } from "./response-body";
import { sseData } from "./sse-events";

export type OpenAIModelConfigInput = z.input<typeof OpenAIModelConfigSchema>;

export interface OpenAIProviderOptions {
  /** Retries after a 429/5xx or a network error, within the run deadline (default 2). */
  maxRetries?: number;
  /** The longest wait one retry may take (default 30 000 ms); a longer `retry-after` ends the call. */
  maxRetryDelayMs?: number;
  /** Environment to read `apiKeyEnv` from (default `process.env`). */
  env?: Record<string, string | undefined>;
  fetch?: typeof globalThis.fetch;
  /** Waits between retries; injectable so tests can check the delay without waiting it. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  now?: () => number;
  logger?: AgentLogger;
}

const DEFAULT_MAX_RETRIES = 2;
const DEFAULT_MAX_RETRY_DELAY_MS = 30_000;
const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 8_000;
const DETAIL_MAX_CHARS = 300;
/** Default of `maxResponseBytes`: far above any real completion, far below what hurts a worker. */
export const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** An error page is only quoted, so only its beginning is read. */
const ERROR_BODY_MAX_BYTES = 64 * 1024;
/** How much of an unexpected body an error message quotes. */
const UNEXPECTED_BODY_CHARS = 200;
/** More tool calls than any model makes in one turn; bounds the array a server's `index` addresses. */
const MAX_TOOL_CALLS = 128;

class RetryableFailure extends Error {
  constructor(
    readonly failure: SwitchboardError,
    readonly retryAfterMs: number | undefined,
  ) {
    super(failure.message);
  }
}

/**
 * Any OpenAI-compatible Chat Completions endpoint with tool calling (OpenAI, Ollama, vLLM, LM Studio,
 * llama.cpp's server). Transient failures (network, 429, 5xx) are retried a bounded number of times
 * within the run deadline; everything else ends the call with an error naming the problem.
 */
export class OpenAIModelProvider implements ModelProvider {
  readonly name: string;
  /** A run's streamed text is bounded by the same figure as one response (see `executeRun`). */
  readonly maxTextChars: number;
  readonly #config: OpenAIModelConfig;
  readonly #maxResponseBytes: number;
  readonly #maxRetries: number;
  readonly #maxRetryDelayMs: number;
  readonly #url: string;
  readonly #env: Record<string, string | undefined>;
  readonly #fetch: typeof globalThis.fetch;
  readonly #sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  readonly #now: () => number;
  readonly #logger: AgentLogger;

  constructor(config: OpenAIModelConfigInput, options: OpenAIProviderOptions = {}) {
    this.#config = OpenAIModelConfigSchema.parse(config);
    this.#maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.#maxRetryDelayMs = options.maxRetryDelayMs ?? DEFAULT_MAX_RETRY_DELAY_MS;
    this.#url = `${this.#config.baseUrl.replace(/\/+$/, "")}/chat/completions`;
    this.name = `openai:${this.#config.model}`;
    this.#maxResponseBytes = this.#config.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.maxTextChars = this.#maxResponseBytes;
    this.#env = options.env ?? process.env;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#sleep = options.sleep ?? abortableSleep;
    this.#now = options.now ?? Date.now;
    this.#logger = options.logger ?? silentLogger;
  }

  async complete(request: ModelRequest): Promise<ModelTurn> {
    const body = JSON.stringify(this.#body(request));
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json",
    };
    const apiKey = this.#config.apiKeyEnv ? this.#env[this.#config.apiKeyEnv] : undefined;
    if (apiKey) headers.authorization = `Bearer ${apiKey}`;

    const attempts = this.#maxRetries + 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#attempt(request, headers, body);
      } catch (error) {
        if (!(error instanceof RetryableFailure)) throw error;
        const failure = error.failure;
        if (attempt >= attempts) throw this.#withAttempts(failure, attempt);
        const delay = error.retryAfterMs ?? Math.min(BACKOFF_BASE_MS * 2 ** (attempt - 1), BACKOFF_MAX_MS);
        if (delay > this.#maxRetryDelayMs) {
          throw this.#withAttempts(
            failure,
            attempt,
            `server asked to retry after ${formatMs(delay)}, more than the ${formatMs(this.#maxRetryDelayMs)} allowed`,
          );
        }
        const deadline = request.run.deadline;
        if (deadline !== undefined && this.#now() + delay >= deadline) {
          throw this.#withAttempts(
            failure,
            attempt,
            `retrying after ${formatMs(delay)} would pass the run deadline`,
          );
        }
        this.#logger.warn(
          { url: this.#url, attempt, delayMs: delay, error: failure.message },
          "model call failed, retrying",
        );
        await this.#sleep(delay, request.signal);
      }
    }
  }

  #body(request: ModelRequest): Record<string, unknown> {
    const body: Record<string, unknown> = {
      // A per-run model override (session or spawn `model`) names a model on the same endpoint.
      model: request.run.model ?? this.#config.model,
      messages: toOpenAIMessages(request.system, request.messages),
      stream: this.#config.stream,
    };
    // Some servers reject an empty tool list, so it is left out when the run has no tools.
    if (request.tools.length > 0) body.tools = toOpenAITools(request.tools);
    if (this.#config.stream) body.stream_options = { include_usage: true };
    if (this.#config.temperature !== undefined) body.temperature = this.#config.temperature;
    return body;
  }

  async #attempt(request: ModelRequest, headers: Record<string, string>, body: string): Promise<ModelTurn> {
    const { timeoutMs } = this.#config;
    if (timeoutMs === undefined) return this.#send(request, request.signal, headers, body);
    // Not AbortSignal.timeout(): inside AbortSignal.any() Node may garbage-collect it before it fires
    // (nodejs/node#57736), and the call then hangs. The timer below holds its controller strongly.
    const timeout = new AbortController();
    const timer = setTimeout(
      () => timeout.abort(new DOMException("model call timed out", "TimeoutError")),
      timeoutMs,
    );
    const signal = AbortSignal.any([request.signal, timeout.signal]);
    try {
      return await this.#send(request, signal, headers, body);
    } catch (error) {
      if (timeout.signal.aborted && !request.signal.aborted) {
        // Not retried: a model that is too slow once is likely too slow again.
        throw this.#error("TIMEOUT", `no complete response within ${timeoutMs} ms (timeoutMs)`, error);
      }
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  async #send(
    request: ModelRequest,
    signal: AbortSignal,
    headers: Record<string, string>,
    body: string,
  ): Promise<ModelTurn> {
    let response: Response;
    try {
      response = await this.#fetch(this.#url, { method: "POST", headers, body, signal });
    } catch (error) {
      if (signal.aborted) throw error;
      throw new RetryableFailure(
        this.#error("UNAVAILABLE", `cannot reach the server: ${networkReason(error)}`, error),
        undefined,
      );
    }
    if (!response.ok) {
      const detail = await responseDetail(response);
      const status = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
      const message = detail ? `${status}: ${detail}` : status;
      if (response.status === 429 || response.status >= 500) {
        const code: ErrorCode = response.status === 429 ? "RATE_LIMITED" : "UNAVAILABLE";
        throw new RetryableFailure(this.#error(code, message), retryAfterMs(response.headers, this.#now()));
      }
      if (response.status === 401 || response.status === 403) {
        const hint = this.#config.apiKeyEnv
          ? ` (the API key comes from the environment variable ${this.#config.apiKeyEnv}${headers.authorization ? "" : ", which is not set"})`
          : " (no apiKeyEnv is configured, so no API key was sent)";
        throw this.#error("UNAUTHORIZED", message + hint);
      }
      throw this.#error("INVALID_REQUEST", message);
    }
    const type = contentType(response);
    // A server may ignore `stream: true` and answer with plain JSON; both are accepted. Anything else
    // (a proxy's HTML login page, plain text) is quoted so the user sees what answered instead.
    if (this.#config.stream && !isJson(type)) {
      if (type === "" || type === "text/event-stream") return this.#readStream(response, request);
      const head = await readTextPrefix(response.body, ERROR_BODY_MAX_BYTES);
      throw this.#malformed(
        `expected text/event-stream, got ${type}: ${excerpt(head, UNEXPECTED_BODY_CHARS)}`,
      );
    }
    return this.#readJson(response, type);
  }

  /** Reading the body past `maxResponseBytes` becomes a run error naming the limit. */
  async #capped<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (error) {
      if (!(error instanceof ResponseTooLargeError)) throw error;
      throw this.#error(
        "PAYLOAD_TOO_LARGE",
        `the response exceeded ${formatBytes(error.limit)} (maxResponseBytes ${error.limit}); the rest was not read`,
        error,
      );
    }
  }

  async #readJson(response: Response, type: string): Promise<ModelTurn> {
    const text = await this.#capped(() => readTextCapped(response.body, this.#maxResponseBytes));
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      const what = type && !isJson(type) ? ` (${type})` : "";
      throw this.#malformed(`the body${what} is not JSON: ${excerpt(text)}`);
    }
    const serverError = errorBodyMessage(value);
    if (serverError !== undefined)
      throw this.#error("UNAVAILABLE", `the server answered with an error: ${serverError}`);
    const parsed = CompletionSchema.safeParse(value);
    if (!parsed.success) throw this.#malformed(describeIssue(parsed.error.issues[0]));
    const choice = parsed.data.choices[0]!;
    const toolCalls: ModelToolCall[] = (choice.message.tool_calls ?? []).map((call, index) => ({
      id: call.id || generatedCallId(index),
      name: call.function.name,
      ...parseToolArguments(call.function.arguments),
    }));
    return turn(choice.message.content ?? "", toolCalls, toUsage(parsed.data.usage));
  }

  async #readStream(response: Response, request: ModelRequest): Promise<ModelTurn> {
    if (!response.body) throw this.#malformed("the streamed response has no body");
    const body = response.body;
    return this.#capped(() => this.#parseStream(body, request));
  }

  async #parseStream(body: ReadableStream<Uint8Array>, request: ModelRequest): Promise<ModelTurn> {
    let text = "";
    let usage: Usage | undefined;
    let complete = false;
    let events = 0;
    let choices = 0;
    // The beginning of the body, to quote when it turns out not to be a stream at all.
    let head = "";
    const calls: { id?: string; name: string; args: string }[] = [];
    const source = cappedChunks(body, this.#maxResponseBytes);
    const tapped = async function* () {
      for await (const chunk of source) {
        if (head.length < UNEXPECTED_BODY_CHARS)
          head += new TextDecoder().decode(chunk.subarray(0, UNEXPECTED_BODY_CHARS));
        yield chunk;
      }
    };
    for await (const data of sseData(tapped())) {
      events++;
      if (data.trim() === "[DONE]") {
        complete = true;
        break;
      }
      let value: unknown;
      try {
        value = JSON.parse(data);
      } catch {
        throw this.#malformed(`a stream event is not JSON: ${excerpt(data)}`);
      }
      const serverError = errorBodyMessage(value);
      if (serverError !== undefined)
        throw this.#error("UNAVAILABLE", `the server sent an error mid-stream: ${serverError}`);
      const parsed = StreamChunkSchema.safeParse(value);
      if (!parsed.success) throw this.#malformed(`stream event: ${describeIssue(parsed.error.issues[0])}`);
      usage = toUsage(parsed.data.usage) ?? usage;
      const choice = parsed.data.choices?.find((c) => (c.index ?? 0) === 0);
      if (!choice) continue;
      choices++;
      const delta = choice.delta;
      if (delta?.content) {
        text += delta.content;
        request.onTextDelta?.(delta.content);
      }
      for (const piece of delta?.tool_calls ?? []) {
        // Servers that omit `index` send one call at a time: a new id starts the next call.
        let index = piece.index;
        if (index === undefined) {
          const known = piece.id ? calls.findIndex((call) => call.id === piece.id) : -1;
          index = known !== -1 ? known : piece.id || calls.length === 0 ? calls.length : calls.length - 1;
        }
        // The array is indexed by the server's number: a huge one must not make it huge.
        if (index >= MAX_TOOL_CALLS)
          throw this.#malformed(
            `tool call index ${index}: one response may make at most ${MAX_TOOL_CALLS} calls`,
          );
        let call = calls[index];
        if (!call) {
          call = { name: "", args: "" };
          calls[index] = call;
        }
        if (piece.id) call.id = piece.id;
        const name = piece.function?.name;
        // Most servers send the whole name once; some repeat it on every delta.
        if (name && name !== call.name) call.name += name;
        if (piece.function?.arguments) call.args += piece.function.arguments;
      }
      if (choice.finish_reason) complete = true;
    }
    if (!complete) {
      const began =
        events === 0 ? `; no event came, the body began: ${excerpt(head, UNEXPECTED_BODY_CHARS)}` : "";
      throw this.#malformed(`the stream ended before the response was complete${began}`);
    }
    // As with a non-streamed completion, an answer that never carried a choice is no answer.
    if (choices === 0)
      throw this.#malformed("no stream event carried a choice (every chunk had `choices: []`)");
    const toolCalls: ModelToolCall[] = [];
    calls.forEach((call, index) => {
      if (!call) return;
      if (call.name === "") throw this.#malformed(`streamed tool call ${index} has no function name`);
      toolCalls.push({
        id: call.id || generatedCallId(index),
        name: call.name,
        ...parseToolArguments(call.args),
      });
    });
    return turn(text, toolCalls, usage);
  }

  #error(code: ErrorCode, reason: string, cause?: unknown): SwitchboardError {
    return new SwitchboardError(code, `model call to ${this.#url} failed: ${reason}`, {
      cause,
      details: { provider: "openai", url: this.#url, model: this.#config.model },
    });
  }

  #malformed(reason: string): SwitchboardError {
    return this.#error("INTERNAL", `malformed response: ${reason}`);
  }

  #withAttempts(failure: SwitchboardError, attempts: number, why?: string): SwitchboardError {
    const suffix = why
      ? ` (gave up after ${plural(attempts, "attempt")}: ${why})`
      : ` (after ${plural(attempts, "attempt")})`;
    return new SwitchboardError(failure.code, failure.message + suffix, {
      cause: failure.cause,
      details: failure.details,
    });
  }
}

function turn(text: string, toolCalls: ModelToolCall[], usage: Usage | undefined): ModelTurn {
  const out: ModelTurn = { text };
  if (toolCalls.length > 0) out.toolCalls = toolCalls;
  if (usage) out.usage = usage;
  return out;
}

/** The media type alone, lower case (`text/event-stream; charset=utf-8` → `text/event-stream`). */
function contentType(response: Response): string {
  return (response.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
}

function isJson(type: string): boolean {
  return type === "application/json" || type.endsWith("+json");
}

function generatedCallId(index: number): string {
  return `call_${index}_${globalThis.crypto.randomUUID().slice(0, 8)}`;
}

/** `retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date. */
export function retryAfterMs(headers: Headers, now: number): number | undefined {
  const ms = Number.parseFloat(headers.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return Math.ceil(ms);
  const raw = headers.get("retry-after")?.trim();
  if (!raw) return undefined;
  if (/^\d+(\.\d+)?$/.test(raw)) return Math.ceil(Number.parseFloat(raw) * 1000);
  const date = Date.parse(raw);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

async function responseDetail(response: Response): Promise<string> {
  let text: string;
  try {
    text = await readTextPrefix(response.body, ERROR_BODY_MAX_BYTES);
  } catch {
    return "";
  }
  try {
    const message = errorBodyMessage(JSON.parse(text));
    if (message !== undefined) return excerpt(message);
  } catch {
    // Not JSON: the raw text is the best description there is.
  }
  return excerpt(text);
}

function networkReason(error: unknown): string {
  const cause = (error as { cause?: unknown })?.cause;
  const causeMessage = cause instanceof Error ? cause.message : undefined;
  const message = error instanceof Error ? error.message : String(error);
  return causeMessage && causeMessage !== message ? `${message} (${causeMessage})` : message;
}

function describeIssue(issue: { path: PropertyKey[]; message: string } | undefined): string {
  if (!issue) return "unexpected shape";
  const path = issue.path
    .map((part) => (typeof part === "number" ? `[${part}]` : `.${String(part)}`))
    .join("");
  return `${path.replace(/^\./, "") || "(root)"}: ${issue.message}`;
}

function excerpt(text: string, max = DETAIL_MAX_CHARS): string {
  // Only the quoted part is flattened: the text may be megabytes long.
  const flat = text
    .slice(0, max * 4)
    .replace(/\s+/g, " ")
    .trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat || "(empty)";
}

function formatBytes(bytes: number): string {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

function formatMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 1)} s` : `${ms} ms`;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
