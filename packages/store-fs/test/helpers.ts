import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** A fresh temp dir for one test; removed by the returned cleanup. */
export async function tempDir(prefix = "sb-store-"): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await fs.promises.mkdtemp(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => fs.promises.rm(dir, { recursive: true, force: true }) };
}

/** Collects what the store logs, for asserting on repairs. */
export function recordingLogger() {
  const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }> = [];
  const at = (level: string) => (message: string, fields?: Record<string, unknown>) => {
    lines.push({ level, message, ...(fields ? { fields } : {}) });
  };
  return { lines, logger: { info: at("info"), warn: at("warn"), error: at("error") } };
}
