// An audit log edited on disk, the way only a tamperer would: verify must name the record.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { openFileStore } from "@switchboard/store-fs";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { AuditService } from "./audit-service";
import type { EventLog } from "./ports/event-log";

const quietBus = { publish: () => undefined } as unknown as EventLog;
const key = new Uint8Array(32).fill(3);
let dir: string | undefined;
afterEach(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

async function withAudit<T>(dataDir: string, use: (audit: AuditService) => Promise<T>): Promise<T> {
  const store = await openFileStore({ dataDir, logger: pino({ level: "silent" }), fsyncMode: "none" });
  try {
    return await use(await AuditService.open(store.audit, store.meta, key, quietBus));
  } finally {
    await store.close();
  }
}

describe("audit.verify on the file store", () => {
  it("names the first bad index when a stored record's data gained a __proto__ key", async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "sb-audit-tamper-"));
    const dataDir = dir;
    await withAudit(dataDir, async (audit) => {
      for (let n = 0; n < 3; n++)
        await audit.append({
          kind: "policy.blocked",
          actor: "agent:main:main",
          data: { ruleId: "flow.no-write-down", n },
        });
      expect(await audit.verify()).toEqual({ ok: true, entries: 3 });
    });

    // Edit record 1 on disk: its data now carries a forged field.
    const file = path.join(dataDir, "audit", "audit.jsonl");
    const text = fs.readFileSync(file, "utf8");
    const tampered = text.replace('"n":1', '"n":1,"__proto__":{"ruleId":"forged","approvedBy":"ops"}');
    expect(tampered).not.toBe(text);
    fs.writeFileSync(file, tampered);

    const result = await withAudit(dataDir, (audit) => audit.verify());
    expect(result).toMatchObject({ ok: false, firstBadIndex: 1 });
  });

  // Until session 23 a tail cut while the gateway was down was reported only until the restarted
  // gateway had appended past the old anchor's index: the next anchor named the new head, and
  // verify answered ok for good.
  it("keeps reporting records cut off the log while the gateway was down after the log grows past them", async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "sb-audit-cut-"));
    const dataDir = dir;
    await withAudit(dataDir, async (audit) => {
      for (let n = 0; n < 6; n++) await audit.append({ kind: "policy.blocked", data: { n } });
    });
    const file = path.join(dataDir, "audit", "audit.jsonl");
    const lines = fs.readFileSync(file, "utf8").split("\n");
    // The header and records 0..2 stay; 3..5 are cut.
    fs.writeFileSync(file, `${lines.slice(0, 4).join("\n")}\n`);

    for (let restart = 0; restart < 2; restart++) {
      const result = await withAudit(dataDir, async (audit) => {
        for (let n = 0; n < 4; n++) await audit.append({ kind: "delivery", data: { n } });
        return audit.verify();
      });
      expect(result).toMatchObject({ ok: false, firstBadIndex: 3 });
      expect(result.reason).toContain("records 3 to 5 were cut from the log while the gateway was down");
    }
  });
});
