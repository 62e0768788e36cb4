import { describe, expect, it } from "vitest";
import { runStoreConformance, sampleMessage } from "./conformance";
import { createMemoryStore } from "./memory-store";

runStoreConformance("memory", async () => ({ store: createMemoryStore(), cleanup: async () => undefined }));

describe("memory store", () => {
  it("refuses an oversized entry with PAYLOAD_TOO_LARGE and writes nothing", async () => {
    const store = createMemoryStore({ maxEntryBytes: 2_000 });
    const sessionId = crypto.randomUUID();
    await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
    await expect(
      store.transcripts.append(sessionId, [sampleMessage("ok"), sampleMessage("x".repeat(3_000))]),
    ).rejects.toMatchObject({ code: "PAYLOAD_TOO_LARGE", message: expect.stringMatching(/entries\[1\]/) });
    expect(await store.transcripts.lastSeq(sessionId)).toBe(0);
  });

  it("refuses calls after close", async () => {
    const store = createMemoryStore();
    await store.close();
    await expect(store.sessions.count()).rejects.toMatchObject({ code: "UNAVAILABLE" });
  });
});
