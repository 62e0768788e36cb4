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
 * Finishes resets, deletes and archivings a crash cut short. The gateway points the index at the
 * new transcript, drops the row or marks it archived before it archives the old transcript, so a
 * crash in between leaves only a transcript no live row points at. Such a transcript is archived
 * here, as the interrupted call would have done: `archive` when the rows naming it are archived,
 * `reset` when its key still has a row, `delete` otherwise.
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
    if (id === undefined) continue;
    const owners = current.get(id);
    let reason: "reset" | "delete" | "archive";
    let key: string | undefined;
    if (owners !== undefined) {
      // Still a live row's transcript, unless every row naming it is archived (an interrupted archive).
      const rows = await Promise.all(
        (Array.isArray(owners) ? owners : [owners]).map((key) => sessions.get(key)),
      );
      if (rows.some((row) => row?.sessionId === id && row.archivedAt === undefined)) continue;
      reason = "archive";
      key = rows.find((row) => row?.sessionId === id)?.key;
    } else {
      key = await headerKey(path.join(transcriptsDir, name));
      reason = key !== undefined && (await sessions.get(key)) ? "reset" : "delete";
    }
    await transcripts.archive(id, reason);
    archived++;
    logger.warn(
      {
        sessionId: id,
        key,
        reason,
      },
      "archived a transcript an interrupted reset, delete or archive left behind",
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
