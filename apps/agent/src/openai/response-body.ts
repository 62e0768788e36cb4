/** The body went past the configured limit; the provider turns it into a run error naming the limit. */
export class ResponseTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`the response is larger than ${limit} bytes`);
    this.name = "ResponseTooLargeError";
  }
}

/**
 * The body's chunks, failing with `ResponseTooLargeError` as soon as more than `maxBytes` arrived, so a
 * hostile or broken server can never make the worker hold (or parse) more than that. Stopping early
 * (limit, error, the consumer breaking off) cancels the body so the connection is released.
 */
export async function* cappedChunks(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  let finished = false;
  let total = 0;
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      total += value.byteLength;
      if (total > maxBytes) throw new ResponseTooLargeError(maxBytes);
      yield value;
    }
  } finally {
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

/** The whole body as text, at most `maxBytes` of it (else `ResponseTooLargeError`). */
export async function readTextCapped(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<string> {
  if (!body) return "";
  const decoder = new TextDecoder();
  const parts: string[] = [];
  for await (const chunk of cappedChunks(body, maxBytes)) parts.push(decoder.decode(chunk, { stream: true }));
  parts.push(decoder.decode());
  return parts.join("");
}

/**
 * The first `maxBytes` of the body as text, the rest discarded: enough to describe an error page
 * without reading all of it.
 */
export async function readTextPrefix(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<string> {
  if (!body) return "";
  const decoder = new TextDecoder();
  const parts: string[] = [];
  let total = 0;
  for await (const chunk of cappedChunks(body, Number.POSITIVE_INFINITY)) {
    const room = maxBytes - total;
    parts.push(decoder.decode(chunk.byteLength > room ? chunk.subarray(0, room) : chunk, { stream: true }));
    total += Math.min(chunk.byteLength, room);
    if (total >= maxBytes) break;
  }
  parts.push(decoder.decode());
  return parts.join("");
}
