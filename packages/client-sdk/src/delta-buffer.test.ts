import { describe, expect, it } from "vitest";
import { DeltaBuffer, MAX_DELTA_BYTES, splitUtf8 } from "./delta-buffer";

const utf8 = (text: string) => Buffer.byteLength(text);

describe("splitUtf8", () => {
  it("keeps short text whole and cuts long text under the byte cap, never inside a surrogate pair", () => {
    expect(splitUtf8("hello")).toEqual(["hello"]);
    const text = `a${"😀".repeat(10)}é`;
    const pieces = splitUtf8(text, 7);
    expect(pieces.join("")).toBe(text);
    for (const piece of pieces) {
      expect(utf8(piece)).toBeLessThanOrEqual(7);
      // A lone surrogate would encode as U+FFFD (3 bytes) and not round-trip.
      expect(Buffer.from(piece).toString()).toBe(piece);
    }
    expect(pieces[0]).toBe("a😀");
  });

  it("cuts a delta of the default size into pieces that each fit the gateway's progress cap", () => {
    const text = "€".repeat(200_000);
    const pieces = splitUtf8(text);
    expect(pieces.join("")).toBe(text);
    expect(pieces.every((piece) => utf8(piece) <= MAX_DELTA_BYTES)).toBe(true);
    expect(pieces.length).toBe(Math.ceil((200_000 * 3) / (MAX_DELTA_BYTES - (MAX_DELTA_BYTES % 3))));
  });
});

describe("DeltaBuffer", () => {
  it("sends a buffer that grew past the cap in pieces, in order", async () => {
    const sent: string[] = [];
    const buffer = new DeltaBuffer(
      async (text) => void sent.push(text),
      10_000,
      1_000_000,
      () => undefined,
    );
    await buffer.add("ж".repeat(70_000));
    await buffer.add("ж".repeat(70_000));
    await buffer.flush();
    expect(sent.join("")).toBe("ж".repeat(140_000));
    expect(sent.length).toBe(3);
    expect(sent.every((piece) => utf8(piece) <= MAX_DELTA_BYTES)).toBe(true);
  });
});
