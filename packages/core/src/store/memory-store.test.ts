import { describe, expect, it } from "vitest";
import { runStoreConformance, sampleMessage } from "./conformance";
import { createMemoryBackend, createMemoryStore } from "./memory-store";

runStoreConformance("memory", async () => {
  const backend = createMemoryBackend();
  return {
    store: createMemoryStore({ backend }),
    openSecond: async () => createMemoryStore({ backend }),
    cleanup: async () => undefined,
  };
});

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

  it("closing one store on a shared backend leaves the other working", async () => {
    const backend = createMemoryBackend();
    const first = createMemoryStore({ backend });
    const second = createMemoryStore({ backend });
    await first.meta.set("k", "v");
    await first.close();
    expect(await second.meta.get("k")).toBe("v");
  });
});
