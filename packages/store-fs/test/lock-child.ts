// A store start for the lock tests: opens `dataDir`, writes one row, holds the store `holdMs`, and
// prints OPENED or REFUSED. `stall` stalls the lock's own write by 1.5 s (a slow disk, a busy pool).
import { openFileStore } from "../src/index";
import { setFaultHook } from "../src/testing";

const [dataDir, name, holdMs, stall] = process.argv.slice(2) as [string, string, string, string?];
const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
if (stall === "stall")
  setFaultHook((op, filePath) => {
    if (op === "write" && /\/LOCK[^/]*$/.test(filePath)) sleep(1500);
    return undefined;
  });
try {
  const store = await openFileStore({ dataDir, fsyncMode: "none" });
  setFaultHook(undefined);
  const now = Date.now();
  await store.sessions.put({
    key: `agent:main:${name}`,
    sessionId: crypto.randomUUID(),
    agentId: "main",
    createdAt: now,
    updatedAt: now,
    taint: "PUBLIC",
    clearance: "INTERNAL",
  });
  process.stdout.write(`OPENED ${name}\n`);
  setTimeout(() => void store.close().then(() => process.exit(0)), Number(holdMs));
} catch (error) {
  process.stdout.write(`REFUSED ${name} ${(error as Error).message}\n`);
  process.exit(0);
}
