import fs from "node:fs";
import path from "node:path";
import type { TranscriptEntry } from "@switchboard/core";
import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it, vi } from "vitest";
import { tempDir } from "../test/helpers";

/**
 * A rotation makes the next commit-log segment current while the previous one may still have a
 * batch in flight. When that batch fails, its appends are taken back out of their transcripts,
 * and with them everything appended to those transcripts after them: none of that may have been
 * acknowledged through the next segment, nor may its seqs be handed out again.
 */

const held = vi.hoisted(() => ({
  /** While set, writes to this segment wait for `release` and then fail with ENOSPC. */
  segment: undefined as string | undefined,
  release: undefined as (() => void) | undefined,
  waiting: undefined as Promise<void> | undefined,
}));

vi.mock("./fs-io", async (importOriginal) => {
  const real = await importOriginal<typeof import("./fs-io")>();
  return {
    ...real,
    writeAllAt: async (fd: number, buffers: readonly Buffer[], position: number) => {
      const target = held.segment ? fs.readlinkSync(`/proc/self/fd/${fd}`) : undefined;
      if (held.segment && target === held.segment && held.waiting) {
        await held.waiting;
        const error: NodeJS.ErrnoException = new Error("ENOSPC: injected, write");
        error.code = "ENOSPC";
        throw error;
      }
      return real.writeAllAt(fd, buffers, position);
    },
  };
});

const { openFileStore } = await import("./file-store");

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  held.segment = undefined;
  held.release?.();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const textOf = (entry: TranscriptEntry) => {
  const part = entry.message?.content[0];
  return part?.type === "text" ? part.text : "";
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("commit-log rotation with the previous segment's last batch failing", () => {
  it("acknowledges no later append of its transcripts through the next segment, and reuses no acknowledged seq", async () => {
    const { dir, cleanup } = await tempDir("sb-rotation-");
    cleanups.push(cleanup);
    const dataDir = path.join(dir, "data");
    const segmentBytes = 4096;
    const store = await openFileStore({ dataDir, fsyncMode: "none", commitLogSegmentBytes: segmentBytes });
    cleanups.push(() => store.close());
    const { sessionId, key, createdAt } = sampleSession();
    await store.transcripts.create({ sessionId, key, createdAt });
    const first = path.join(dataDir, "commit-log", "000000000001.log");
    const second = path.join(dataDir, "commit-log", "000000000002.log");
    const acknowledged = new Map<number, string>();
    for (let i = 0; fs.statSync(first).size < segmentBytes - 800; i++) {
      const [entry] = await store.transcripts.append(sessionId, [
        sampleMessage(`fill-${i}-${"f".repeat(300)}`),
      ]);
      acknowledged.set(entry!.seq, textOf(entry!));
    }

    // A crosses the segment size: its batch is held in the first segment while the rotation
    // makes the second current; B goes to the second.
    held.segment = first;
    held.waiting = new Promise((resolve) => {
      held.release = resolve;
    });
    const a = store.transcripts.append(sessionId, [sampleMessage(`A-${"a".repeat(900)}`)]);
    const aOutcome = a.then(
      () => "acknowledged",
      () => "refused",
    );
    for (let i = 0; i < 200 && !fs.existsSync(second); i++) await sleep(5);
    expect(fs.existsSync(second)).toBe(true);
    await sleep(20);
    const b = store.transcripts.append(sessionId, [sampleMessage("B")]);
    const bOutcome = b.then(
      ([entry]) => {
        acknowledged.set(entry!.seq, textOf(entry!));
        return "acknowledged";
      },
      () => "refused",
    );
    // Without the fix B is acknowledged here, before A's batch has failed.
    await Promise.race([bOutcome, sleep(100)]);
    held.release!();
    expect(await aOutcome).toBe("refused");
    const bResult = await bOutcome;
    held.segment = undefined;

    const [c] = await store.transcripts.append(sessionId, [sampleMessage("C")]);
    expect(c!.seq, `C's seq after B ${bResult}`).toBeGreaterThan(Math.max(...acknowledged.keys()));
    acknowledged.set(c!.seq, "C");

    const check = async (read: { entries: TranscriptEntry[] }) => {
      const bySeq = new Map(read.entries.map((entry) => [entry.seq, textOf(entry)]));
      for (const [seq, text] of acknowledged) expect(bySeq.get(seq), `seq ${seq}`).toBe(text);
      expect(read.entries.some((entry) => textOf(entry).startsWith("A-"))).toBe(false);
    };
    await check(await store.transcripts.read(sessionId, { limit: 500 }));
    await store.close();
    const again = await openFileStore({ dataDir, fsyncMode: "none", commitLogSegmentBytes: segmentBytes });
    cleanups.push(() => again.close());
    await check(await again.transcripts.read(sessionId, { limit: 500 }));
  });
});
