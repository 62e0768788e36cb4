import { describe, expect, it } from "vitest";
import { ResponseTooLargeError, readTextCapped, readTextPrefix } from "./response-body";

/** A body of `count` chunks of `size` bytes that records whether the reader cancelled it. */
function body(count: number, size: number, fill = 0x61) {
  const state = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (state.pulled === count) return controller.close();
      state.pulled++;
      controller.enqueue(new Uint8Array(size).fill(fill));
    },
    cancel() {
      state.cancelled = true;
    },
  });
  return { stream, state };
}

describe("response bodies", () => {
  it("reads a body within the limit whole", async () => {
    const { stream } = body(4, 256);
    expect(await readTextCapped(stream, 1024)).toBe("a".repeat(1024));
  });

  it("stops at the first chunk past the limit and releases the body", async () => {
    const { stream, state } = body(1000, 1024);
    const error = await readTextCapped(stream, 4096).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect((error as ResponseTooLargeError).limit).toBe(4096);
    expect(state.pulled).toBeLessThan(10);
    expect(state.cancelled).toBe(true);
  });

  it("reads only the beginning of a body it is going to quote", async () => {
    const { stream, state } = body(1000, 1000);
    expect(await readTextPrefix(stream, 2500)).toBe("a".repeat(2500));
    expect(state.cancelled).toBe(true);
    expect(state.pulled).toBeLessThan(10);
  });

  it("decodes a multi-byte character split between chunks", async () => {
    const bytes = new TextEncoder().encode("é✓");
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const byte of bytes) controller.enqueue(new Uint8Array([byte]));
        controller.close();
      },
    });
    expect(await readTextCapped(stream, 1024)).toBe("é✓");
  });
});
