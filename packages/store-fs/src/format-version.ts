import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { errorCode, isNotFound, writeFileAtomically } from "./fs-io";

/** Version of the data dir layout as a whole; each file kind also carries its own version. */
export const STORE_FORMAT_VERSION = 1;
export const STORE_FORMAT_NAME = "switchboard-file-store";
export const VERSION_FILE = "VERSION";
/** Top-level entries this store creates; finding any of them without a VERSION marker is suspicious. */
export const STORE_ENTRIES = [
  "sessions",
  "transcripts",
  "archive",
  "runs",
  "audit",
  "meta",
  "commit-log",
  "tmp",
];

export type VersionCheck =
  | { status: "ok"; version: number }
  | { status: "missing"; storeFilesPresent: boolean }
  | { status: "newer"; version: number }
  | { status: "unreadable"; reason: string };

/** What to do about an unreadable VERSION marker. */
export function versionFix(markerPath: string): string {
  return `restore ${markerPath} from a backup, or, if a Switchboard of store format ${STORE_FORMAT_VERSION} created this data dir, make it a file holding {"format":"${STORE_FORMAT_NAME}","version":${STORE_FORMAT_VERSION}}`;
}

/** Reads the VERSION marker without changing anything. */
export async function inspectFormatVersion(dataDir: string): Promise<VersionCheck> {
  let text: string;
  try {
    text = await fs.promises.readFile(path.join(dataDir, VERSION_FILE), "utf8");
  } catch (error) {
    // A read of a directory fails naming no path: report it as the marker it cannot be.
    if (errorCode(error) === "EISDIR") return { status: "unreadable", reason: "it is a directory" };
    if (!isNotFound(error)) throw error;
    const names = await fs.promises.readdir(dataDir).catch(() => [] as string[]);
    return { status: "missing", storeFilesPresent: names.some((name) => STORE_ENTRIES.includes(name)) };
  }
  let marker: { format?: unknown; version?: unknown };
  try {
    marker = JSON.parse(text) as typeof marker;
  } catch {
    return { status: "unreadable", reason: "not JSON" };
  }
  if (
    marker.format !== STORE_FORMAT_NAME ||
    typeof marker.version !== "number" ||
    !Number.isInteger(marker.version)
  ) {
    return { status: "unreadable", reason: `expected {"format":"${STORE_FORMAT_NAME}","version":N}` };
  }
  // Versions count from 1: a lower one was written by no Switchboard.
  if (marker.version < 1)
    return { status: "unreadable", reason: `version ${marker.version} is not a store format version` };
  if (marker.version > STORE_FORMAT_VERSION) return { status: "newer", version: marker.version };
  return { status: "ok", version: marker.version };
}

/** Refuses a data dir this version cannot read; writes the marker into a fresh one. */
export async function ensureFormatVersion(dataDir: string, durable: boolean): Promise<number> {
  const check = await inspectFormatVersion(dataDir);
  const markerPath = path.join(dataDir, VERSION_FILE);
  switch (check.status) {
    case "ok":
      return check.version;
    case "newer":
      throw new SwitchboardError(
        "UNAVAILABLE",
        `data dir ${dataDir} has store format version ${check.version}, newer than this Switchboard supports (${STORE_FORMAT_VERSION}); upgrade Switchboard or use another data dir`,
        { details: { version: check.version, supported: STORE_FORMAT_VERSION } },
      );
    case "unreadable":
      throw new SwitchboardError(
        "INTERNAL",
        `${markerPath} is unreadable (${check.reason}); refusing to guess the format: ${versionFix(markerPath)}`,
      );
    case "missing":
      if (check.storeFilesPresent) {
        throw new SwitchboardError(
          "INTERNAL",
          `${markerPath} is missing but the data dir holds store files; refusing to guess the format (run switchboard doctor)`,
        );
      }
      await writeFileAtomically(
        markerPath,
        `${JSON.stringify({ format: STORE_FORMAT_NAME, version: STORE_FORMAT_VERSION })}\n`,
        durable,
      );
      return STORE_FORMAT_VERSION;
  }
}
