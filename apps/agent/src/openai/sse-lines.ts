/**
 * The `data:` payloads of a server-sent-events body, one per event (multi-line data joined with
 * newlines). Comments, `event:`/`id:` fields and blank keep-alives are skipped. Stopping early
 * (a `[DONE]`, an error) cancels the body so the connection is released.
 */
export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  let data: string[] = [];
  let finished = false;
  const takeLine = (line: string): string | undefined => {
    if (line === "") {
      const event = data.length > 0 ? data.join("\n") : undefined;
      data = [];
      return event;
    }
    if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
    return undefined;
  };
  try {
    while (!finished) {
      const { value, done } = await reader.read();
      finished = done;
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      while (true) {
        const newline = buffer.search(/\r\n|\r|\n/);
        if (newline === -1) break;
        // A chunk may end between the \r and \n of one line break: wait for the next chunk.
        if (!finished && buffer[newline] === "\r" && newline === buffer.length - 1) break;
        const width = buffer.startsWith("\r\n", newline) ? 2 : 1;
        const event = takeLine(buffer.slice(0, newline));
        buffer = buffer.slice(newline + width);
        if (event !== undefined) yield event;
      }
    }
    const last = takeLine(buffer) ?? takeLine("");
    if (last !== undefined) yield last;
  } finally {
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
