import type { RunRecord } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { InProcessRunWaiters } from "./run-waiters";

const run = (runId: string) => ({ runId, status: "ok" }) as RunRecord;

describe("InProcessRunWaiters", () => {
  it("wakes every waiter of the run that ended, and only those", async () => {
    const waiters = new InProcessRunWaiters();
    const a1 = waiters.wait("a", 10_000);
    const a2 = waiters.wait("a", 10_000);
    const b = waiters.wait("b", 30);
    waiters.ended(run("a"));
    expect(await a1).toEqual({ ended: run("a") });
    expect(await a2).toEqual({ ended: run("a") });
    expect(await b).toEqual({ stopped: "run still in progress after waiting 30 ms" });
    expect(waiters.size).toBe(0);
  });

  it("stops a wait on abort and forgets it", async () => {
    const waiters = new InProcessRunWaiters();
    const controller = new AbortController();
    const waiting = waiters.wait("a", 10_000, controller.signal);
    controller.abort();
    expect(await waiting).toEqual({ stopped: "wait aborted" });
    expect(waiters.size).toBe(0);
    waiters.ended(run("a"));
  });

  it("tells the waiters of a run that left this process to wait elsewhere, and forgets them", async () => {
    const waiters = new InProcessRunWaiters();
    const a = waiters.wait("a", 10_000);
    const b = waiters.wait("b", 10_000);
    waiters.moved("a");
    expect(await a).toEqual({ moved: true });
    expect(waiters.size).toBe(1);
    waiters.ended(run("b"));
    expect(await b).toEqual({ ended: run("b") });
    expect(waiters.size).toBe(0);
  });

  it("answers at once, holding nothing, for a caller that is already gone", async () => {
    const waiters = new InProcessRunWaiters();
    const gone = new AbortController();
    gone.abort();
    expect(await waiters.wait("a", 600_000, gone.signal)).toEqual({ stopped: "wait aborted" });
    expect(waiters.size).toBe(0);
  });
});
