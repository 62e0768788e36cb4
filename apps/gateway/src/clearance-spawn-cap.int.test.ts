import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@switchboard/core";
import { afterEach, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { TestPeer } from "./testing/test-peer";

// A sub-agent session's clearance in force is min(stored spawn cap, configured). Rows are served with
// that clearance; a write made while the agent's clearance is lowered must still store the spawn cap,
// or the session would stay at the lowered level once the config went back up.

const CHILD = "agent:intern:main";
let dataDir: string | undefined;
let gateway: Gateway | undefined;
const peers: TestPeer[] = [];

async function start(internClearance: "INTERNAL" | "RESTRICTED") {
  for (const p of peers.splice(0)) p.close();
  await gateway?.close();
  dataDir ??= await mkdtemp(join(tmpdir(), "switchboard-spawn-cap-"));
  gateway = await Gateway.start({
    config: parseConfig({
      agents: {
        list: [
          { id: "main", default: true },
          { id: "intern", clearance: internClearance },
        ],
      },
      gateway: { port: 0 },
    }),
    dataDir,
    port: 0,
    fsync: "none",
  });
  const op = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
  peers.push(op);
  return op;
}

afterEach(async () => {
  for (const p of peers.splice(0)) p.close();
  await gateway?.close();
  gateway = undefined;
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
  dataDir = undefined;
});

it("keeps a sub-agent's spawn cap through writes made while its agent's clearance is lowered", async () => {
  let op = await start("RESTRICTED");
  await op.call("sessions.create", { key: CHILD });
  // Make it a sub-agent session whose spawn cap (its requester's clearance at the spawn) is CONFIDENTIAL.
  const raw = gateway!.store.sessions;
  const read = (await raw.getVersioned(CHILD))!;
  await raw.put(
    { ...read.row, spawnedBy: "agent:main:main", clearance: "CONFIDENTIAL", clearancePinned: false },
    { expectedVersion: read.version },
  );
  const status = async () =>
    (await op.call<{ clearance: string }>("sessions.status", { sessionKey: CHILD })).clearance;
  expect(await status()).toBe("CONFIDENTIAL");

  // The operator lowers intern's clearance for a while: min(CONFIDENTIAL, INTERNAL).
  op = await start("INTERNAL");
  expect(await status()).toBe("INTERNAL");
  // Ordinary writes of the row meanwhile: a label, and a reset.
  await op.call("sessions.patch", { key: CHILD, label: "renamed" });
  await op.call("sessions.reset", { key: CHILD });
  const stored = (await gateway!.store.sessions.get(CHILD))!.clearance;

  // Raised back: the sub-agent should be at its spawn cap again, min(CONFIDENTIAL, RESTRICTED).
  op = await start("RESTRICTED");
  expect(stored).toBe("CONFIDENTIAL");
  expect(await status()).toBe("CONFIDENTIAL");
}, 60_000);
