import path from "node:path";
import { sampleMessage } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { openClosedAfter, tempDir } from "../test/helpers";
import type { FileStore, FileStoreOptions } from "./file-store";
import { setFaultHook } from "./fs-io";

/**
 * A transcript's reads serve acknowledged entries only. An append's bytes are in the transcript
 * file before its commit-log batch is durable, and a refused commit cuts them out again and hands
 * their seqs to the next append: a read that served them would show a seq whose content later
 * changes (a client paging history, a `sessions_history` call).
 */

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  setFaultHook(undefined);
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshStore(options: Partial<FileStoreOptions> = {}): Promise<FileStore> {
  const { dir, cleanup } = await tempDir("sb-acked-reads-");
  cleanups.push(cleanup);
  return openClosedAfter(cleanups, path.join(dir, "data"), options);
}

async function withTranscript(store: FileStore): Promise<string> {
  const sessionId = crypto.randomUUID();
  await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
  await store.transcripts.append(sessionId, [sampleMessage("one")]);
  return sessionId;
}

const textOf = (entry: { message?: { content: Array<{ type: string; text?: string }> } }) =>
  entry.message?.content[0]?.text;

describe("transcript reads while an append's commit is in flight", () => {
  it("never serve an append that is then refused, whose seq the next append takes", async () => {
    const store = await freshStore({ fsyncMode: "always" });
    const sessionId = await withTranscript(store);
    const served: string[] = [];
    for (let round = 0; round < 5; round++) {
      // The commit log's fsync fails (EIO): the append is refused and taken back out.
      setFaultHook((op, filePath) => (op === "sync" && filePath.includes("commit-log") ? "EIO" : undefined));
      const refused = store.transcripts.append(sessionId, [sampleMessage(`refused-${round}`)]);
      const tail = store.transcripts.read(sessionId, { limit: 5 });
      const older = store.transcripts.read(sessionId, { limit: 1, before: 3 + round });
      await expect(refused).rejects.toMatchObject({ code: "UNAVAILABLE" });
      setFaultHook(undefined);
      for (const page of [await tail, await older]) {
        for (const entry of page.entries) {
          if (textOf(entry) === `refused-${round}`) served.push(`seq ${entry.seq}: refused-${round}`);
        }
      }
      const [written] = await store.transcripts.append(sessionId, [sampleMessage(`real-${round}`)]);
      expect(written!.seq).toBe(2 + round);
      const { entries } = await store.transcripts.read(sessionId, { limit: 1 });
      expect(entries.map((entry) => [entry.seq, textOf(entry)])).toEqual([[2 + round, `real-${round}`]]);
    }
    expect(served).toEqual([]);
  });

  it("serve an append once its commit resolved, not before", async () => {
    const store = await freshStore({ fsyncMode: "always" });
    const sessionId = await withTranscript(store);
    const appended = store.transcripts.append(sessionId, [sampleMessage("two")]);
    const during = store.transcripts.read(sessionId, { limit: 10 });
    await appended;
    expect((await during).entries.map(textOf)).toEqual(["one"]);
    const after = await store.transcripts.read(sessionId, { limit: 10 });
    expect(after.entries.map(textOf)).toEqual(["one", "two"]);
    // Paging back from the acknowledged tail works as before.
    const page = await store.transcripts.read(sessionId, { limit: 1, before: after.entries[1]!.seq });
    expect(page.entries.map(textOf)).toEqual(["one"]);
  });
});
