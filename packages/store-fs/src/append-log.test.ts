import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { AppendLog, type AppendLogOptions } from "./append-log";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function openLog(
  gather?: AppendLogOptions["gather"],
  after?: AppendLogOptions["after"],
): Promise<AppendLog> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  const log = await AppendLog.create(path.join(dir, "log"), "header", {
    durable: false,
    label: "test log",
    ...(gather ? { gather } : {}),
    ...(after ? { after } : {}),
  });
  cleanups.push(() => log.close());
  return log;
}

/** Two writes of one turn of the event loop, the second many promise hops after the first. */
async function twoWritesFarApart(log: AppendLog): Promise<void> {
  const first = log.append("one\n");
  for (let hop = 0; hop < 20; hop++) await Promise.resolve();
  await Promise.all([first, log.append("two\n")]);
}

describe("append log group commit", () => {
  it("by default starts a batch a few promise hops after its first write", async () => {
    const log = await openLog();
    await twoWritesFarApart(log);
    expect(log.batches).toBe(2);
  });

  it("with gather 'turn' puts every write of the same event-loop turn in one batch", async () => {
    const log = await openLog("turn");
    await twoWritesFarApart(log);
    expect(log.batches).toBe(1);
    // A write of a later turn goes in a batch of its own.
    await new Promise((resolve) => setImmediate(resolve));
    await log.append("three\n");
    expect(log.batches).toBe(2);
    expect(log.size).toBe("header\none\ntwo\nthree\n".length);
  });
});

describe("append log held by an earlier one (`after`)", () => {
  function held(): { gate: Promise<void>; open: () => void; fail: (error: Error) => void } {
    let open!: () => void;
    let fail!: (error: Error) => void;
    const gate = new Promise<void>((resolve, reject) => {
      open = resolve;
      fail = reject;
    });
    return { gate, open, fail };
  }

  it("writes nothing before it settles", async () => {
    const { gate, open } = held();
    const log = await openLog(undefined, gate);
    let done = false;
    const write = log.append("one\n").then(() => {
      done = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(done).toBe(false);
    expect(log.size).toBe("header\n".length);
    open();
    await write;
    expect(log.size).toBe("header\none\n".length);
  });

  it("fails every write queued by then when it rejects (undone newest first), and works again after", async () => {
    const { gate, fail } = held();
    const log = await openLog(undefined, gate);
    const undone: string[] = [];
    const first = log.append("one\n", () => undone.push("one"));
    const second = log.append("two\n", () => undone.push("two"));
    fail(new SwitchboardError("UNAVAILABLE", "the earlier log's batch failed"));
    await expect(first).rejects.toThrow("the earlier log's batch failed");
    await expect(second).rejects.toThrow("the earlier log's batch failed");
    expect(undone).toEqual(["two", "one"]);
    await log.append("three\n");
    expect(log.size).toBe("header\nthree\n".length);
  });

  it("settled() rejects when a write queued before it fails", async () => {
    const { gate, fail } = held();
    const log = await openLog(undefined, gate);
    const write = log.append("one\n").catch(() => undefined);
    const settled = log.settled();
    fail(new SwitchboardError("UNAVAILABLE", "no"));
    await expect(settled).rejects.toThrow("no");
    await write;
    await expect(log.settled()).resolves.toBeUndefined();
  });
});
