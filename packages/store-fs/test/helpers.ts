import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Logger } from "@switchboard/core";
import { type FileStore, type FileStoreOptions, openFileStore } from "../src/file-store";
import { setFaultHook } from "../src/fs-io";

/** A fresh temp dir for one test; removed by the returned cleanup. */
export async function tempDir(prefix = "sb-store-"): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await fs.promises.mkdtemp(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => fs.promises.rm(dir, { recursive: true, force: true }) };
}

/** Collects what the store logs, for asserting on repairs; fields include child bindings. */
export function recordingLogger(): {
  lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }>;
  logger: Logger;
} {
  const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }> = [];
  const make = (bindings: Record<string, unknown>): Logger => {
    const at = (level: string) => (fields: Record<string, unknown>, message?: string) => {
      const merged = { ...bindings, ...fields };
      lines.push({
        level,
        message: message ?? "",
        ...(Object.keys(merged).length > 0 ? { fields: merged } : {}),
      });
    };
    return {
      debug: at("debug"),
      info: at("info"),
      warn: at("warn"),
      error: at("error"),
      child: (more) => make({ ...bindings, ...more }),
    };
  };
  return { lines, logger: make({}) };
}

/**
 * A crash child's reproducible random numbers in [0, 1) (xorshift): each round writes a different
 * but replayable mix for its seed.
 */
export function seededRandom(seedArg: string | undefined): () => number {
  let seed = Number(seedArg) || 1;
  return () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x1_0000_0000;
  };
}

/** One line to the parent test on stdout (acknowledgements it checks after the kill). */
export const printLine = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/**
 * A crash child's planned death: `"<op>:<path part>:<n>"` kills the process (SIGKILL) at the n-th
 * such fs call, before it runs. Absent or `"timer"` (the parent kills it at a random moment): no hook.
 */
export function killAtFault(killArg: string | undefined): void {
  if (!killArg || killArg === "timer") return;
  const [op, where, nth] = killArg.split(":");
  let seen = 0;
  setFaultHook((called, filePath) => {
    if (called === op && filePath.includes(where!) && ++seen === Number(nth))
      process.kill(process.pid, "SIGKILL");
    return undefined;
  });
}

/**
 * Opens a file store (fsync off) whose close is registered in `cleanups`, unless the test closed it
 * itself first.
 */
export async function openClosedAfter(
  cleanups: Array<() => Promise<void>>,
  dataDir: string,
  options: Partial<FileStoreOptions> = {},
): Promise<FileStore> {
  const store = await openFileStore({ dataDir, fsyncMode: "none", ...options });
  let closed = false;
  const close = store.close.bind(store);
  store.close = () => {
    closed = true;
    return close();
  };
  cleanups.push(async () => {
    if (!closed) await store.close();
  });
  return store;
}
