import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cp, mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { openFileStore } from "@switchboard/store-fs";
import { afterAll, describe, expect, it } from "vitest";
import { AuditService } from "../audit-service";
import { auditKey } from "../data-dir-secrets";
import type { EventLog } from "../ports/event-log";

/**
 * Audit anchoring under kill -9: a child gateway appends audit records from several loops and is
 * killed at random moments. Every append resolves only once its record's head is anchored outside
 * the log, so after the kill the log verifies (no false alarm), and cutting off even the newest
 * acknowledged record alone is noticed by `verify`.
 */

const ROUNDS = 4;
const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(gatewayRoot, "test", "audit-anchor-gateway.mjs");
const distEntry = join(gatewayRoot, "dist", "index.js");
const built = existsSync(distEntry) && readFileSync(distEntry, "utf8").includes("Gateway");
if (!built) console.warn(`[audit-anchor-crash] skipped: ${distEntry} is missing; build the gateway first`);

const children = new Set<ChildProcess>();
const dirs: string[] = [];
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** Runs the child until it has acknowledged a few records, then `killAfterMs` more; returns acknowledged indexes. */
function runChild(dataDir: string, killAfterMs: number): Promise<number[]> {
  const child = spawn(process.execPath, [childScript, dataDir], { stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  let stdout = "";
  let stderr = "";
  let timer: NodeJS.Timeout | undefined;
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    if (!timer && stdout.includes("ACK ")) timer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  return new Promise((resolveRun, reject) => {
    child.on("close", (_code, signal) => {
      children.delete(child);
      if (signal !== "SIGKILL") reject(new Error(`child exited by itself: ${stderr}`));
      const lines = stdout.split("\n");
      lines.pop();
      resolveRun(lines.filter((line) => line.startsWith("ACK ")).map((line) => Number(line.slice(4))));
    });
  });
}

const quietBus = { publish: () => undefined } as unknown as EventLog;

async function verify(dataDir: string) {
  const store = await openFileStore({ dataDir });
  try {
    const audit = await AuditService.open(store.audit, store.meta, await auditKey(dataDir), quietBus);
    return { result: await audit.verify(), last: (await store.audit.last())?.index ?? -1 };
  } finally {
    await store.close();
  }
}

/** Cuts the audit log right before the record `index` (the file's lines are one record each). */
async function cutBefore(dataDir: string, index: number): Promise<void> {
  const file = join(dataDir, "audit", "audit.jsonl");
  const text = readFileSync(file, "utf8");
  const found = text.indexOf(`"index":${index},"prevHash"`);
  expect(found, `record ${index} in the audit log`).toBeGreaterThan(0);
  const at = text.lastIndexOf("\n", found) + 1;
  const handle = await open(file, "r+");
  try {
    await handle.truncate(Buffer.byteLength(text.slice(0, at)));
  } finally {
    await handle.close();
  }
}

describe.skipIf(!built)("audit anchor under kill -9", () => {
  it(`notices a cut of even the newest acknowledged record, through ${ROUNDS} kills`, {
    timeout: 90_000,
  }, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "sb-anchor-crash-"));
    dirs.push(dataDir);
    for (let round = 0; round < ROUNDS; round++) {
      const acknowledged = await runChild(dataDir, 150 + round * 97);
      expect(acknowledged.length, `round ${round}: records acknowledged`).toBeGreaterThan(0);
      const newest = Math.max(...acknowledged);
      const after = await verify(dataDir);
      expect(after.result, `round ${round}: the log after the kill`).toMatchObject({ ok: true });
      expect(after.last).toBeGreaterThanOrEqual(newest);

      // On a copy: cut the log right before the newest acknowledged record.
      const copy = await mkdtemp(join(tmpdir(), "sb-anchor-cut-"));
      dirs.push(copy);
      await cp(dataDir, copy, { recursive: true });
      await rm(join(copy, "LOCK"), { force: true });
      await cutBefore(copy, newest);
      const cut = await verify(copy);
      expect(cut.last).toBe(newest - 1);
      expect(cut.result, `round ${round}: a log cut before record ${newest}`).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/ends before the expected head/),
      });
    }
  });
});
