import type { RunRecord } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { InProcessActiveRuns } from "./active-runs";

const record = (runId: string) => ({ runId, sessionKey: "s", message: "" }) as RunRecord;

describe("InProcessActiveRuns", () => {
  it("keeps active runs by id and lists a snapshot", () => {
    const runs = new InProcessActiveRuns<string>();
    runs.add({ record: record("r1"), worker: "w" });
    runs.add({ record: record("r2") });
    expect(runs.get("r1")?.worker).toBe("w");
    const all = runs.all();
    runs.delete("r1");
    expect(all.map((run) => run.record.runId)).toEqual(["r1", "r2"]);
    expect(runs.get("r1")).toBeUndefined();
    expect(runs.all().map((run) => run.record.runId)).toEqual(["r2"]);
  });

  it("tracks creations in flight per idempotency key", async () => {
    const runs = new InProcessActiveRuns<string>();
    const creation = Promise.resolve(record("r1"));
    runs.startCreating("key", creation);
    expect(runs.creating("key")).toBe(creation);
    await expect(runs.creating("key")).resolves.toMatchObject({ runId: "r1" });
    runs.doneCreating("key");
    expect(runs.creating("key")).toBeUndefined();
  });

  it("answers run ends not yet durable until they are saved", () => {
    const runs = new InProcessActiveRuns<string>();
    runs.keepUnsaved(record("r1"));
    runs.keepUnsaved(record("r2"));
    expect(runs.unsaved("r1")?.runId).toBe("r1");
    const seen: string[] = [];
    for (const unsaved of runs.unsavedRecords()) {
      seen.push(unsaved.runId);
      runs.saved(unsaved.runId);
    }
    expect(seen).toEqual(["r1", "r2"]);
    expect(runs.unsaved("r1")).toBeUndefined();
    expect([...runs.unsavedRecords()]).toEqual([]);
  });

  it("counts a session's runs and every run's input bytes, from creation until the run leaves", () => {
    const runs = new InProcessActiveRuns<string>();
    const run = (runId: string, sessionKey: string, message: string) => ({
      record: { runId, sessionKey, message } as RunRecord,
    });
    const creating = runs.startCreatingOn("s1", 5);
    expect(runs.load("s1")).toEqual({ sessionRuns: 1, runs: 1, bytes: 5 });
    const first = run("r1", "s1", "héllo");
    runs.add(first);
    runs.add(first);
    creating();
    creating();
    expect(runs.load("s1")).toEqual({ sessionRuns: 1, runs: 1, bytes: 6 });
    runs.add(run("r2", "s2", "abc"));
    expect(runs.load("s2")).toEqual({ sessionRuns: 1, runs: 2, bytes: 9 });
    // Clipped before it leaves: what was counted is what is taken off.
    first.record.message = "";
    runs.delete("r1");
    runs.delete("r1");
    expect(runs.load("s1")).toEqual({ sessionRuns: 0, runs: 1, bytes: 3 });
    runs.delete("r2");
    expect(runs.load("s2")).toEqual({ sessionRuns: 0, runs: 0, bytes: 0 });
  });
});
