import { describe, expect, it } from "vitest";
import { historyMessage, runPayload } from "../testing/run-fixtures";
import { buildModelInput, historyToChat, presentMessage } from "./model-input";

const agentProvenance = {
  kind: "agent" as const,
  fromSessionKey: "agent:research:main",
  fromRunId: "run-0",
  chainId: "chain-1",
  hop: 1,
};

describe("buildModelInput", () => {
  it("puts the agent, session and the run's injected context in the system prompt", () => {
    const context = "Agent-to-agent message context:\nAgent 1 (requester) session: agent:research:main.";
    const { system } = buildModelInput(runPayload("hi", { context, lane: "nested" }), {
      instructions: "Be brief.",
    });
    expect(system.startsWith("Be brief.")).toBe(true);
    expect(system).toContain(
      'You are the agent "main", answering in the Switchboard session agent:main:main (lane nested).',
    );
    expect(system).toContain(context);
  });

  it("presents a user's message as is and another agent's message as from that agent", () => {
    const fromUser = buildModelInput(runPayload("hello"));
    expect(fromUser.messages.at(-1)).toEqual({ role: "user", content: "hello" });

    const fromAgent = buildModelInput(runPayload("please summarise", { provenance: agentProvenance }));
    const last = fromAgent.messages.at(-1);
    expect(last?.role).toBe("user");
    expect(last?.role === "user" && last.content).toBe(
      "[Message from another agent (session agent:research:main), not from your user]\nplease summarise",
    );
  });

  it("converts history, drops an echo of the input and keeps only the most recent messages", () => {
    const history = [
      historyMessage(1, "user", [{ type: "text", text: "first" }]),
      historyMessage(2, "assistant", [{ type: "text", text: "one" }]),
      historyMessage(3, "user", [{ type: "text", text: "second" }], agentProvenance),
      historyMessage(4, "assistant", [{ type: "text", text: "two" }]),
      historyMessage(5, "user", [{ type: "text", text: "now" }]),
    ];
    const { messages } = buildModelInput(runPayload("now", { history }), { historyLimit: 3 });
    expect(messages).toEqual([
      { role: "assistant", content: "one" },
      {
        role: "user",
        content: "[Message from another agent (session agent:research:main), not from your user]\nsecond",
      },
      { role: "assistant", content: "two" },
      { role: "user", content: "now" },
    ]);
  });
});

describe("presentMessage", () => {
  it("labels sub-agent reports, operator and system messages", () => {
    expect(
      presentMessage("done", { kind: "subagent", childSessionKey: "agent:main:subagent:1", runId: "r1" }),
    ).toBe("[Report from sub-agent (session agent:main:subagent:1, run r1), not from your user]\ndone");
    expect(presentMessage("x", { kind: "operator", actor: "ops" })).toBe(
      "[Message from the operator ops]\nx",
    );
    expect(presentMessage("x", { ...agentProvenance, step: "reply" })).toContain(", reply step)");
  });
});

describe("historyToChat", () => {
  it("pairs recorded tool calls with their results and drops unpaired ones", () => {
    const chat = historyToChat([
      historyMessage(1, "toolResult", [{ type: "toolResult", toolCallId: "orphan", name: "x", result: {} }]),
      historyMessage(2, "user", [{ type: "text", text: "go" }]),
      historyMessage(3, "toolCall", [
        { type: "toolCall", id: "a", name: "sessions_list", args: { limit: 5 } },
      ]),
      historyMessage(4, "toolCall", [{ type: "toolCall", id: "b", name: "agents_list", args: {} }]),
      historyMessage(5, "toolResult", [
        { type: "toolResult", toolCallId: "a", name: "sessions_list", result: { count: 0 } },
      ]),
      historyMessage(6, "toolResult", [
        { type: "toolResult", toolCallId: "b", name: "agents_list", result: { agents: [] } },
      ]),
      historyMessage(7, "toolCall", [{ type: "toolCall", id: "c", name: "session_status", args: {} }]),
      historyMessage(8, "assistant", [{ type: "text", text: "done" }]),
    ]);
    expect(chat).toEqual([
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: "",
        toolCalls: [
          { id: "a", name: "sessions_list", args: { limit: 5 } },
          { id: "b", name: "agents_list", args: {} },
        ],
      },
      { role: "tool", toolCallId: "a", name: "sessions_list", result: { count: 0 } },
      { role: "tool", toolCallId: "b", name: "agents_list", result: { agents: [] } },
      { role: "assistant", content: "done" },
    ]);
  });
});
