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

  it("steps past a newest message that alone is too big", () => {
    const capped = capHistory(page(["small", "x".repeat(5000)]), 2000);
    expect(capped.messages).toEqual([]);
    expect(capped.truncated).toBe(true);
    expect(capped.nextBefore).toBe(2);
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
          expect(capped.messages).toEqual(result.messages.slice(result.messages.length - kept));
          if (kept < result.messages.length) expect(capped.truncated).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });
});
