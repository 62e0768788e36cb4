import type { TranscriptEntry } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { InProcessRecentMessages } from "./recent-messages";

const message = (seq: number): TranscriptEntry => ({
  type: "message",
  seq,
  id: `m${seq}`,
  ts: seq,
  label: "PUBLIC",
  message: { role: "user", content: [{ type: "text", text: `message ${seq}` }] },
});
const seqs = (entries: TranscriptEntry[] | undefined) => entries?.map((entry) => entry.seq);

describe("the recent-messages cache filled while appends land", () => {
  it("keeps an append that completed while the tail read was out, which the read did not see", () => {
    const cache = new InProcessRecentMessages();
    const fill = cache.fillFrom("s");
    cache.add("s", [message(5)]);
    fill({ entries: [1, 2, 3, 4].map(message), truncated: false });
    expect(seqs(cache.get("s"))).toEqual([1, 2, 3, 4, 5]);
  });

  it("does not cache twice an append the read saw and that was added after it", () => {
    const cache = new InProcessRecentMessages();
    const fill = cache.fillFrom("s");
    fill({ entries: [1, 2, 3, 4, 5].map(message), truncated: false });
    cache.add("s", [message(5)]);
    cache.add("s", [message(6)]);
    expect(seqs(cache.get("s"))).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("does not cache a failed or truncated read, and forgets what it held for it", () => {
    const cache = new InProcessRecentMessages();
    const failed = cache.fillFrom("s");
    cache.add("s", [message(7)]);
    failed();
    expect(cache.get("s")).toBeUndefined();
    cache.fillFrom("s")({ entries: [message(1)], truncated: true });
    expect(cache.get("s")).toBeUndefined();
    cache.fillFrom("s")({ entries: [message(8)], truncated: false });
    expect(seqs(cache.get("s"))).toEqual([8]);
  });
});
