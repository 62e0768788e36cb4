import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ConfigInput, createMemoryStore, parseConfig, type Store } from "@switchboard/core";
import { dropTestSchema, testPgUrl, testSchemaName } from "@switchboard/store-pg/testing";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { testStoreKind } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

// A session's clearance was computed once, when its row was created, and stored: lowering an
// agent's clearance (or a channel's label) in the config and restarting left every existing session
// of that agent (channel) with the old, higher clearance, reading and receiving data the config no
// longer allows it (hostile review of labels, finding 3). The clearance in force is now computed on
// every read from the current config (`SessionsService.clearanceOf`), except where an operator set
// it explicitly; a sub-agent's stays capped by its requester's at the spawn.

const ALICE = "agent:main:webchat:dm:alice";
const BOB = "agent:main:webchat:dm:bob";
const MAIN = "agent:main:main";
const INTERN = "agent:intern:main";
const SECRET = "the code is zulu-4242";

type Levels = { intern?: "PUBLIC" | "INTERNAL" | "CONFIDENTIAL" | "RESTRICTED"; webchat: string };

function configOf(levels: Levels): ConfigInput {
  return {
    agents: {
      list: [
        { id: "main", default: true },
        { id: "intern", ...(levels.intern ? { clearance: levels.intern } : {}) },
      ],
    },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    session: { agentToAgent: { maxPingPongTurns: 0 } },
    labels: { channels: { webchat: levels.webchat as "PUBLIC" } },
  };
}

/** Gateways started one after the other on the same store (the one SWITCHBOARD_TEST_STORE names). */
class Restarts {
  private gateway: Gateway | undefined;
  private readonly peers: TestPeer[] = [];
  private dataDir: string | undefined;
  private memory: Store | undefined;
  private schema: string | undefined;

  /** Stops the running gateway (if any) and starts one with `levels` on the same data; its operator. */
  async start(levels: Levels): Promise<{ op: TestPeer; gateway: Gateway }> {
    await this.stop();
    const kind = testStoreKind();
    this.dataDir ??= await mkdtemp(join(tmpdir(), "switchboard-clearance-"));
    if (kind === "memory") this.memory ??= createMemoryStore();
    if (kind === "postgres") this.schema ??= testSchemaName("sbclr");
    const config = configOf(levels);
    this.gateway = await Gateway.start({
      config: parseConfig({
        ...config,
        gateway: { port: 0 },
        ...(this.schema
          ? { store: { kind: "postgres", url: testPgUrl(), schema: this.schema, pool: { max: 4 } } }
          : {}),
      }),
      dataDir: this.dataDir,
      port: 0,
      fsync: "none",
      ...(this.memory ? { store: this.memory } : {}),
    });
    const op = await TestPeer.connect(this.gateway.url, {
      token: this.gateway.operatorToken,
      role: "operator",
    });
    this.peers.push(op);
    return { op, gateway: this.gateway };
  }

  async stop(): Promise<void> {
    for (const peer of this.peers.splice(0)) peer.close();
    await this.gateway?.flows.idle();
    await this.gateway?.close();
    this.gateway = undefined;
  }

  async close(): Promise<void> {
    await this.stop();
    if (this.dataDir) await rm(this.dataDir, { recursive: true, force: true });
    if (this.schema) await dropTestSchema(this.schema);
    this.dataDir = this.memory = this.schema = undefined;
  }
}

const restarts = new Restarts();
afterEach(() => restarts.close());

const status = (op: TestPeer, sessionKey: string) =>
  op.call<{ taint: string; clearance: string }>("sessions.status", { sessionKey });

async function listed(op: TestPeer, key: string): Promise<{ clearance: string } | undefined> {
  const list = await op.call<{ sessions: Array<{ key: string; clearance: string }> }>("sessions.list", {
    limit: 100,
  });
  return list.sessions.find((row) => row.key === key);
}

/** `agent:main:webchat:dm:alice` holds CONFIDENTIAL data (webchat is CONFIDENTIAL while it arrives). */
async function confidentialAlice(op: TestPeer): Promise<void> {
  await op.call("sessions.create", { key: ALICE, channel: "webchat" });
  await op.call("chat.send", { sessionKey: ALICE, message: SECRET });
  expect(await status(op, ALICE)).toMatchObject({ taint: "CONFIDENTIAL", clearance: "CONFIDENTIAL" });
}

/** A session tool called as `as`: its result (`{status, ...}`). */
async function toolAs(
  op: TestPeer,
  as: string,
  tool: string,
  args: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const answer = await op.call<{ result?: Record<string, unknown> } & Record<string, unknown>>(
    "tools.invoke",
    { tool, args, as },
  );
  return answer.result ?? answer;
}

const historyAs = (op: TestPeer, as: string, sessionKey: string) =>
  toolAs(op, as, "sessions_history", { sessionKey });

describe("an agent's clearance changed in the config", () => {
  it("lowered: its existing sessions hold the lower clearance after a restart (no read-up past it)", async () => {
    let { op } = await restarts.start({ webchat: "CONFIDENTIAL" });
    await confidentialAlice(op);
    await op.call("sessions.create", { key: INTERN });
    expect(await status(op, INTERN)).toMatchObject({ clearance: "RESTRICTED" });

    ({ op } = await restarts.start({ intern: "PUBLIC", webchat: "CONFIDENTIAL" }));
    await op.call("sessions.create", { key: "agent:intern:cron:daily" });
    expect(await status(op, "agent:intern:cron:daily")).toMatchObject({ clearance: "PUBLIC" });
    // The existing session of the agent: reading CONFIDENTIAL history is read-up now ...
    const read = await historyAs(op, INTERN, ALICE);
    expect(read).toMatchObject({ status: "forbidden" });
    expect(JSON.stringify(read)).not.toContain("zulu-4242");
    // ... and the operator sees the clearance in force.
    expect(await status(op, INTERN)).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    expect(await listed(op, INTERN)).toMatchObject({ clearance: "PUBLIC" });
  });

  it("raised: an existing session it was derived for follows it up (it is what a new session there gets)", async () => {
    let { op } = await restarts.start({ intern: "PUBLIC", webchat: "CONFIDENTIAL" });
    await confidentialAlice(op);
    await op.call("sessions.create", { key: INTERN });
    expect(await historyAs(op, INTERN, ALICE)).toMatchObject({ status: "forbidden" });

    ({ op } = await restarts.start({ intern: "CONFIDENTIAL", webchat: "CONFIDENTIAL" }));
    expect(await status(op, INTERN)).toMatchObject({ clearance: "CONFIDENTIAL" });
    const read = await historyAs(op, INTERN, ALICE);
    expect(read).toMatchObject({ status: "ok" });
    expect(await status(op, INTERN)).toMatchObject({ taint: "CONFIDENTIAL" });
  });

  it("a clearance an operator set on the session holds whatever the config says later", async () => {
    let { op } = await restarts.start({ webchat: "CONFIDENTIAL" });
    await op.call("sessions.create", { key: INTERN });
    await op.call("sessions.patch", { key: INTERN, clearance: "INTERNAL" });
    await op.call("sessions.create", { key: "agent:intern:cron:pinned", clearance: "CONFIDENTIAL" });

    ({ op } = await restarts.start({ intern: "PUBLIC", webchat: "CONFIDENTIAL" }));
    expect(await status(op, INTERN)).toMatchObject({ clearance: "INTERNAL" });
    expect(await status(op, "agent:intern:cron:pinned")).toMatchObject({ clearance: "CONFIDENTIAL" });
  });

  it("a sub-agent session keeps its spawn cap and takes its agent's lowered clearance", async () => {
    const { gateway } = await restarts.start({ intern: "INTERNAL", webchat: "CONFIDENTIAL" });
    const child = {
      ...gateway.sessions.draft("agent:intern:subagent:c1", {
        spawnedBy: MAIN,
        spawnDepth: 1,
        clearance: "CONFIDENTIAL",
      }),
    };
    // A spawn's clearance is its requester's cap, not an operator's pin ...
    expect(child.clearancePinned).toBeUndefined();
    // ... and rows written before carry the pin flag: either way the agent's clearance caps it.
    expect(gateway.sessions.clearanceOf(child)).toBe("INTERNAL");
    expect(gateway.sessions.clearanceOf({ ...child, clearancePinned: true })).toBe("INTERNAL");
    expect(gateway.sessions.clearanceOf({ ...child, clearance: "PUBLIC" })).toBe("PUBLIC");
  });
});

describe("a channel's label lowered in the config", () => {
  it("its existing chat sessions hold the lower clearance: a CONFIDENTIAL send into one is write-down", async () => {
    let { op } = await restarts.start({ webchat: "CONFIDENTIAL" });
    await confidentialAlice(op);
    await op.call("sessions.create", { key: BOB, channel: "webchat" });
    await op.call("sessions.create", { key: MAIN });
    // The main session (clearance RESTRICTED) takes in Alice's CONFIDENTIAL history.
    expect(await historyAs(op, MAIN, ALICE)).toMatchObject({ status: "ok" });
    expect(await status(op, MAIN)).toMatchObject({ taint: "CONFIDENTIAL" });
    expect(await status(op, BOB)).toMatchObject({ clearance: "CONFIDENTIAL" });

    ({ op } = await restarts.start({ webchat: "PUBLIC" }));
    const sent = await toolAs(op, MAIN, "sessions_send", {
      sessionKey: BOB,
      message: "the code is zulu-4242",
      timeoutSeconds: 0,
    });
    expect(sent).toMatchObject({ status: "forbidden" });
    expect(JSON.stringify(sent)).toContain("write-down blocked");
    expect(JSON.stringify(await op.call("sessions.history", { sessionKey: BOB }))).not.toContain("zulu-4242");
    expect(await status(op, BOB)).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    expect(await listed(op, BOB)).toMatchObject({ clearance: "PUBLIC" });
  });

  it("a session already holding data above its new clearance keeps it, refuses more, and a reset clears it", async () => {
    let { op } = await restarts.start({ webchat: "CONFIDENTIAL" });
    await confidentialAlice(op);
    await op.call("sessions.create", { key: MAIN });
    expect(await historyAs(op, MAIN, ALICE)).toMatchObject({ status: "ok" });

    ({ op } = await restarts.start({ webchat: "PUBLIC" }));
    // Taint above clearance: shown as it is (the operator sees it and can reset) ...
    expect(await status(op, ALICE)).toMatchObject({ taint: "CONFIDENTIAL", clearance: "PUBLIC" });
    // ... no CONFIDENTIAL data goes in any more ...
    const sent = await toolAs(op, MAIN, "sessions_send", {
      sessionKey: ALICE,
      message: "more secrets",
      timeoutSeconds: 0,
    });
    expect(sent).toMatchObject({ status: "forbidden" });
    // ... and a reset brings it back within its clearance.
    await op.call("sessions.reset", { key: ALICE });
    expect(await status(op, ALICE)).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
  });
});
