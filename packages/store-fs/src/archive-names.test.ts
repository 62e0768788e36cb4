import { describe, expect, it } from "vitest";
import { archivedAt, archiveStamp } from "./archive-names";

describe("archive names", () => {
  const id = "0b7c6f1e-8a52-4c3e-9d7a-2f1e5b6c7d8e";
  it("reads back the time an archive name was stamped with", () => {
    const at = new Date("2026-11-23T21:45:58.123Z");
    expect(archivedAt(`${id}.${archiveStamp(at)}.reset.jsonl`)).toBe(at.getTime());
    expect(archivedAt(`${id}.${archiveStamp(at)}-2.delete.jsonl`)).toBe(at.getTime());
  });
  it("ignores names that are not archives", () => {
    expect(archivedAt(`${id}.jsonl`)).toBeUndefined();
    expect(archivedAt(`${id}.2026-11-23.reset.jsonl`)).toBeUndefined();
    expect(archivedAt("notes.txt")).toBeUndefined();
  });
});
