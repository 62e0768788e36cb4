import type { SessionsHistoryResult } from "@switchboard/core";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { capHistory } from "./cap-history";
import { message } from "./testing/recording-backend";

const size = (value: unknown) => new TextEncoder().encode(JSON.stringify(value)).length;

function page(texts: string[]): SessionsHistoryResult {
  return {
    status: "ok",
    sessionKey: "agent:main:main",
    sessionId: "s",
    messages: texts.map((text, i) => message(i + 1, "user", text)),
    truncated: false,
  };
}

describe("capHistory", () => {
  it("returns a page within the cap unchanged", () => {
    const result = page(["a", "b"]);
    expect(capHistory(result, 65536)).toBe(result);
  });

  it("drops whole messages from the old end, flags truncated and points nextBefore at the oldest kept", () => {
    const result = page(["x".repeat(400), "y".repeat(400), "z".repeat(400)]);
    const capped = capHistory(result, size(result) - 100);
    expect(capped.messages.map((m) => m.seq)).toEqual([2, 3]);
    expect(capped.truncated).toBe(true);
    expect(capped.nextBefore).toBe(2);
  });

  it("counts UTF-8 bytes, not characters", () => {
    const result = page(["é".repeat(300), "é".repeat(300)]);
    // 600 characters of text but ~1200 bytes: a character count would keep both.
    const capped = capHistory(result, 1000);
    expect(capped.messages.map((m) => m.seq)).toEqual([2]);
    expect(size(capped)).toBeLessThanOrEqual(1000);
  });

  it("returns a clipped copy of a newest message that alone is too big, with its full size, and steps past it", () => {
    const result = page(["small", "x".repeat(200_000)]);
    const capped = capHistory(result, 65536);
    expect(size(capped)).toBeLessThanOrEqual(65536);
    expect(capped.messages).toHaveLength(1);
    const [clipped] = capped.messages;
    expect(clipped!.seq).toBe(2);
    expect(clipped!.clipped).toEqual({ bytes: size(result.messages[1]) });
    const text = (clipped!.content[0] as { text: string }).text;
    expect(text.length).toBeGreaterThan(60_000);
    expect("x".repeat(200_000).startsWith(text)).toBe(true);
    expect(capped.truncated).toBe(true);
    expect(capped.nextBefore).toBe(2);
  });

  it("never clips inside a surrogate pair", () => {
    const capped = capHistory(page(["😀".repeat(5000)]), 2001);
    const text = (capped.messages[0]!.content[0] as { text: string }).text;
    expect(text.length % 2).toBe(0);
    expect(size(capped)).toBeLessThanOrEqual(2001);
  });

  it("always fits the cap, keeps the newest messages and never hides a cut (property)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ maxLength: 300, unit: "grapheme" }), { maxLength: 30 }),
        fc.integer({ min: 300, max: 6000 }),
        (texts, max) => {
          const result = page(texts);
          const capped = capHistory(result, max);
          expect(size(capped)).toBeLessThanOrEqual(Math.max(max, size({ ...result, messages: [] })));
          const kept = capped.messages.length;
          if (capped.messages[0]?.clipped) {
            // Only the newest message, cut to fit.
            expect(kept).toBe(1);
            expect(capped.messages[0].seq).toBe(result.messages.at(-1)!.seq);
          } else expect(capped.messages).toEqual(result.messages.slice(result.messages.length - kept));
          if (kept < result.messages.length) expect(capped.truncated).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });
});
