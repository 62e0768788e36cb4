import { type AssignedRun, connect, type SwitchboardClient, serve } from "@switchboard/client";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "./testing/test-gateway";

const WORKER_TOKEN = "subagent-model-worker-token-0123";

const OLLAMA = {
  provider: "openai",
  baseUrl: "http://127.0.0.1:11434/v1",
  model: "qwen3:8b",
  apiKeyEnv: "OPENAI_API_KEY",
  temperature: 0.2,
} as const;

function configWith(subagents: Record<string, unknown>, research: Record<string, unknown> = {}) {
  return {
    auth: {
      tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main", "research"] }],
    },
    agents: {
      defaults: { subagents },
      list: [
        { id: "main", default: true, subagents: { allowAgents: ["research"] } },
        { id: "research", ...research },
      ],
    },
  };
}

let gw: TestGateway | undefined;
const clients: SwitchboardClient[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await gw?.close();
  gw = undefined;
});

/**
 * A real gateway and an SDK worker: `main` spawns a `research` child (optionally naming a model), and
 * the child's `run.assigned` is returned as the worker received it.
 */
async function spawnAndCapture(
  config: ReturnType<typeof configWith>,
  spawnArgs: Record<string, unknown> = {},
): Promise<{ child: AssignedRun; parent: AssignedRun }> {
  gw = await startTestGateway(config);
  const assigned: AssignedRun[] = [];
  const worker = await serve({ url: gw.url, token: WORKER_TOKEN }, ["main", "research"], async (run, ctx) => {
    assigned.push(run);
    if (run.agentId === "main" && run.input.provenance.kind === "user") {
      const spawned = await ctx.invokeTool("sessions_spawn", {
        task: "look",
        agentId: "research",
        ...spawnArgs,
      });
      return { reply: JSON.stringify(spawned) };
    }
    return { reply: "done" };
  });
  const op = await connect({ url: gw.url, token: gw.token, role: "operator" });
  clients.push(op);
  const { runId } = await op.chat.send({ sessionKey: "main", message: "delegate" });
  const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
  expect(result.status).toBe("ok");
  const { runId: childRunId } = JSON.parse(result.reply ?? "{}") as { runId: string };
  expect(await op.agent.wait({ runId: childRunId, timeoutMs: 5_000 })).toMatchObject({ status: "ok" });
  await worker.stop();
  const child = assigned.find((run) => run.runId === childRunId);
  const parent = assigned.find((run) => run.runId === runId);
  expect(child).toBeDefined();
  return { child: child!, parent: parent! };
}

describe("sub-agent model in run.assigned", () => {
  it("carries a subagents.model object to the child's worker intact", async () => {
    const { child, parent } = await spawnAndCapture(configWith({ model: OLLAMA }));
    expect(child.model).toEqual({ ...OLLAMA, stream: true });
    // The requester runs with its own model: the sub-agent setting is only for children.
    expect(parent.model).toBeUndefined();
  });

  it("prefers the child agent's own subagents.model over agents.defaults", async () => {
    const own = { provider: "scripted", rules: [{ when: ".*", reply: "scripted child" }] };
    const { child } = await spawnAndCapture(configWith({ model: OLLAMA }, { subagents: { model: own } }));
    expect(child.model).toMatchObject(own);
    expect(child.model).not.toHaveProperty("baseUrl");
  });

  it("sends a model name as a string, and nothing when subagents.model is null", async () => {
    const named = await spawnAndCapture(configWith({ model: "qwen3:8b" }));
    expect(named.child.model).toBe("qwen3:8b");
    await gw?.close();
    gw = undefined;
    const none = await spawnAndCapture(configWith({ model: null }));
    expect(none.child).not.toHaveProperty("model");
  });

  it("lets sessions_spawn's model name override a configured object", async () => {
    const { child } = await spawnAndCapture(configWith({ model: OLLAMA }), { model: "qwen3:8b" });
    expect(child.model).toBe("qwen3:8b");
  });
});
