// A power cut soon after the first start could lose `audit.key` (it was written without an fsync);
// the next start then made a new key and chained every later record with it, so `audit.verify`
// failed for ever and `doctor` said the data dir was fine.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { runCli } from "./cli/main";
import type { CliIo } from "./cli/output";
import { startTestGateway, type TestGateway } from "./testing/test-gateway";

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close().catch(() => undefined);
  gw = undefined;
});

async function doctor(dataDir: string) {
  let stdout = "";
  const io: CliIo = {
    out: (text) => {
      stdout += `${text}\n`;
    },
    err: () => undefined,
    interactive: false,
  };
  const code = await runCli(["doctor", "--data-dir", dataDir, "--json"], io, {});
  return { code, report: JSON.parse(stdout) as { issues: Array<{ code: string; severity: string }> } };
}

describe("a lost audit key", () => {
  it("stops the start, naming the file and the fix, instead of chaining on with a new key", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: "agent:main:main" });
    await op.call("sessions.reset", { key: "agent:main:main" });
    const keyFile = join(gw.dataDir, "audit.key");
    const restart = gw.restart(() => rm(keyFile));
    await expect(restart).rejects.toThrow(
      `the audit key file ${keyFile} is missing, but the audit log holds records chained with it; restore it from a backup`,
    );
    const { code, report } = await doctor(gw.dataDir);
    expect(code).not.toBe(0);
    expect(report.issues).toContainEqual(
      expect.objectContaining({ code: "missing-audit-key", severity: "error" }),
    );
    gw = undefined;
  });
});
