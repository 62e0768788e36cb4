import { describe, expect, it } from "vitest";
import { sseData } from "./sse-events";

async function* chunksOf(parts: (string | Uint8Array)[]): AsyncGenerator<Uint8Array> {
  const encoder = new TextEncoder();
  for (const part of parts) yield typeof part === "string" ? encoder.encode(part) : part;
}

async function collect(parts: (string | Uint8Array)[]): Promise<string[]> {
  const out: string[] = [];
  for await (const data of sseData(chunksOf(parts))) out.push(data);
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
    expect(await collect(["data: a\n\ndata: b\n"])).toEqual(["a", "b"]);
  });

  it("skips events whose data is empty", async () => {
    expect(await collect(["data:\n\ndata: \n\ndata: x\n\n", "data:\r\n\r\n"])).toEqual(["x"]);
  });

  it("decodes multi-byte characters split across chunks", async () => {
    const bytes = new TextEncoder().encode("data: héllo ✓\n\n");
    expect(await collect([...bytes].map((byte) => new Uint8Array([byte])))).toEqual(["héllo ✓"]);
  });

  it("assembles one multi-megabyte line delivered in many small chunks", async () => {
    const piece = "x".repeat(4096);
    const count = 1024; // 4 MiB in 4 KiB chunks: quadratic re-scanning would cost ~2 GB of copying
    const parts = ["data: ", ...Array.from({ length: count }, () => piece), "\n\n", "data: after\n\n"];
    const out = await collect(parts);
    expect(out).toHaveLength(2);
    expect(out[0]).toHaveLength(piece.length * count);
    expect(out[1]).toBe("after");
  });
});
