import { createParser, type EventSourceMessage } from "eventsource-parser";

/**
 * The `data:` payloads of a server-sent-events stream, one per event (multi-line data joined with
 * newlines). Parsing is eventsource-parser's, which stays linear however a long line is chunked; the
 * caller bounds the input (see `cappedChunks`). Comments, `event:`/`id:` fields, keep-alives and
 * events whose data is empty (`data:` alone) carry nothing and are skipped. A last event the server
 * did not end with a blank line is still delivered.
 */
export async function* sseData(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending: string[] = [];
  const parser = createParser({
    onEvent: (event: EventSourceMessage) => {
      if (event.data.trim() !== "") pending.push(event.data);
    },
  });
  const drain = function* () {
    const ready = pending;
    pending = [];
    yield* ready;
  };
  for await (const chunk of chunks) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    yield* drain();
  }
  // Two line breaks end an unterminated last line and dispatch its event; no-ops otherwise.
  parser.feed(`${decoder.decode()}\n\n`);
  yield* drain();
}
