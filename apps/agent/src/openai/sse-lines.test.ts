import { describe, expect, it } from "vitest";
import { sseData } from "./sse-lines";

function body(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function collect(chunks: string[]): Promise<string[]> {
  const out: string[] = [];
  for await (const data of sseData(body(chunks))) out.push(data);
  return out;
}

describe("sseData", () => {
  it("yields one payload per event, whatever the chunking and line endings", async () => {
    const text = 'data: {"a":1}\n\n: keep-alive\n\nevent: message\r\ndata: {"b":2}\r\n\r\ndata: [DONE]\n\n';
    const expected = ['{"a":1}', '{"b":2}', "[DONE]"];
    expect(await collect([text])).toEqual(expected);
    expect(await collect(text.split(""))).toEqual(expected);
  });

  it("joins multi-line data and keeps a final event without a trailing blank line", async () => {
    expect(await collect(["data: line one\ndata:line two\n\ndata: last"])).toEqual([
      "line one\nline two",
      "last",
    ]);
  });

  it("decodes multi-byte characters split across chunks", async () => {
    const bytes = new TextEncoder().encode("data: héllo ✓\n\n");
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const byte of bytes) controller.enqueue(new Uint8Array([byte]));
        controller.close();
      },
    });
    const out: string[] = [];
    for await (const data of sseData(stream)) out.push(data);
    expect(out).toEqual(["héllo ✓"]);
  });
});
