import fs from "node:fs";
import path from "node:path";
import { parseSessionId } from "@switchboard/core";
import { closeFile, openFile } from "./fs-io";
import { parseJsonLine, readFirstLine } from "./line-scan";
import type { StoreLogger } from "./logger";
import type { FileSessionIndex } from "./session-index";
import type { FileTranscriptStore } from "./transcript-store";

/** A transcript file name's sessionId, when the name is one the store writes. */
export function sessionIdOfFileName(name: string): string | undefined {
  if (!name.endsWith(".jsonl")) return undefined;
  const stem = name.slice(0, -".jsonl".length);
  try {
    const id = parseSessionId(stem);
    return id === stem ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Finishes resets and deletes a crash cut short. The gateway points the index at the new
 * transcript (or drops the row) before it archives the old transcript, so a crash in between
 * leaves only a transcript no row points at. Such a transcript is archived here, as the
 * interrupted call would have done: `reset` when its key still has a row, `delete` otherwise.
 */
export async function finishInterruptedRetirements(
  transcriptsDir: string,
  sessions: FileSessionIndex,
  transcripts: FileTranscriptStore,
  logger: StoreLogger,
): Promise<number> {
  const current = sessions.sessionIds();
  let archived = 0;
  for (const name of await fs.promises.readdir(transcriptsDir)) {
    const id = sessionIdOfFileName(name);
    if (id === undefined || current.has(id)) continue;
    const key = await headerKey(path.join(transcriptsDir, name));
    const reason = key !== undefined && (await sessions.get(key)) ? "reset" : "delete";
    await transcripts.archive(id, reason);
    archived++;
    logger.warn(
      {
        sessionId: id,
        key,
        reason,
      },
      "archived a transcript an interrupted reset or delete left behind",
    );
  }
  return archived;
}

async function headerKey(filePath: string): Promise<string | undefined> {
  let fd: number;
  try {
    fd = await openFile(filePath, "r");
  } catch {
    return undefined;
  }
  try {
    const key = parseJsonLine((await readFirstLine(fd, 64 * 1024)) ?? Buffer.alloc(0))?.key;
    return typeof key === "string" ? key : undefined;
  } finally {
    await closeFile(fd);
  }
}
