import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { AppendLog, type AppendLogOptions } from "./append-log";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function openLog(gather?: AppendLogOptions["gather"]): Promise<AppendLog> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  const log = await AppendLog.create(path.join(dir, "log"), "header", {
    durable: false,
    label: "test log",
    ...(gather ? { gather } : {}),
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
