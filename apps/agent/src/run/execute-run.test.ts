import { describe, expect, it } from "vitest";
import type { ModelProvider, ModelRequest, ModelTurn } from "../model/model-types";
import { fakeRunContext, runPayload } from "../testing/run-fixtures";
import { executeRun } from "./execute-run";

/** A model that plays back the given turns and keeps a copy of what it was asked. */
class PlaybackModel implements ModelProvider {
  readonly name = "playback";
  readonly requests: ModelRequest[] = [];
  constructor(
    private readonly turns: (ModelTurn | ((request: ModelRequest) => ModelTurn | Promise<ModelTurn>))[],
  ) {}
  async complete(request: ModelRequest): Promise<ModelTurn> {
    this.requests.push({ ...request, messages: structuredClone(request.messages) });
    const next = this.turns.shift();
    if (!next) throw new Error("playback model has no turn left");
    return typeof next === "function" ? next(request) : next;
  }
}

describe("executeRun", () => {
  it("executes tool calls through the run context and feeds the results back to the model", async () => {
    const model = new PlaybackModel([
      {
        text: "Checking.",
        toolCalls: [
          { id: "c1", name: "sessions_list", args: { limit: 2 } },
          { id: "c2", name: "agents_list", args: {} },
        ],
        usage: { inputTokens: 10, outputTokens: 3 },
      },
      { text: "There are 2 sessions.", usage: { inputTokens: 20, outputTokens: 5 } },
    ]);
    const { ctx, calls, progress } = fakeRunContext({
      sessions_list: () => ({ status: "ok", count: 2 }),
      agents_list: () => ({ status: "ok", agents: ["main"] }),
    });
    const result = await executeRun(runPayload("how many sessions?"), model, ctx);

    expect(result).toEqual({ reply: "There are 2 sessions.", usage: { inputTokens: 30, outputTokens: 8 } });
    expect(calls).toEqual([
      { name: "sessions_list", args: { limit: 2 } },
      { name: "agents_list", args: {} },
    ]);
    expect(model.requests[1]?.messages.slice(-3)).toEqual([
      {
        role: "assistant",
        content: "Checking.",
        toolCalls: [
          { id: "c1", name: "sessions_list", args: { limit: 2 } },
          { id: "c2", name: "agents_list", args: {} },
        ],
      },
      { role: "tool", toolCallId: "c1", name: "sessions_list", result: { status: "ok", count: 2 } },
      { role: "tool", toolCallId: "c2", name: "agents_list", result: { status: "ok", agents: ["main"] } },
    ]);
    expect(progress).toEqual([
      { kind: "tool-call", data: { toolCallId: "c1", name: "sessions_list", args: { limit: 2 } } },
      {
        kind: "tool-result",
        data: { toolCallId: "c1", name: "sessions_list", result: { status: "ok", count: 2 } },
      },
      { kind: "tool-call", data: { toolCallId: "c2", name: "agents_list", args: {} } },
      {
        kind: "tool-result",
        data: { toolCallId: "c2", name: "agents_list", result: { status: "ok", agents: ["main"] } },
      },
      { kind: "text-delta", data: { text: "There are 2 sessions." } },
    ]);
  });

  it("gives the model the run's tools, context and the message with its provenance", async () => {
    const model = new PlaybackModel([{ text: "ok" }]);
    const { ctx } = fakeRunContext();
    const provenance = {
      kind: "agent" as const,
      fromSessionKey: "agent:b:main",
      fromRunId: "r0",
      chainId: "c",
      hop: 2,
    };
    await executeRun(
      runPayload("do it", { provenance, context: "Agent 2 (target) session: agent:main:main." }),
      model,
      ctx,
    );
    const request = model.requests[0]!;
    expect(request.tools.map((t) => t.name)).toEqual(["sessions_send", "sessions_spawn"]);
    expect(request.system).toContain("Agent 2 (target) session: agent:main:main.");
    expect(request.messages.at(-1)).toEqual({
      role: "user",
      content: "[Message from another agent (session agent:b:main), not from your user]\ndo it",
    });
    expect(request.run.input.provenance).toEqual(provenance);
  });

  it("does not repeat streamed text as one more text-delta", async () => {
    const model = new PlaybackModel([
      (request) => {
        request.onTextDelta?.("Hel");
        request.onTextDelta?.("lo");
        return { text: "Hello" };
      },
    ]);
    const { ctx, progress } = fakeRunContext();
    expect((await executeRun(runPayload("hi"), model, ctx)).reply).toBe("Hello");
    expect(progress).toEqual([
      { kind: "text-delta", data: { text: "Hel" } },
      { kind: "text-delta", data: { text: "lo" } },
    ]);
  });

  it("answers a call with unusable arguments with an error result instead of invoking the tool", async () => {
    const model = new PlaybackModel([
      {
        toolCalls: [{ id: "c1", name: "sessions_send", args: {}, argsError: "arguments are not valid JSON" }],
      },
      (request) => {
        const last = request.messages.at(-1);
        return { text: last?.role === "tool" ? JSON.stringify(last.result) : "no result" };
      },
    ]);
    const { ctx, calls } = fakeRunContext({ sessions_send: () => ({ status: "ok" }) });
    const result = await executeRun(runPayload("x"), model, ctx);
    expect(calls).toEqual([]);
    expect(JSON.parse(result.reply)).toEqual({
      status: "error",
      error: "tool sessions_send: arguments are not valid JSON",
    });
  });

  it("stops a model that keeps calling tools after the round limit", async () => {
    const forever = (): ModelTurn => ({ toolCalls: [{ id: "c", name: "session_status", args: {} }] });
    const model = new PlaybackModel(Array.from({ length: 20 }, () => forever));
    const { ctx, calls } = fakeRunContext({ session_status: () => ({ status: "ok" }) });
    await expect(executeRun(runPayload("loop"), model, ctx, { maxToolRounds: 3 })).rejects.toThrow(
      "run stopped: the model was still calling tools after 3 tool rounds",
    );
    expect(calls).toHaveLength(3);
  });

  it("does not call the model when the deadline has already passed", async () => {
    const model = new PlaybackModel([{ text: "late" }]);
    const { ctx } = fakeRunContext();
    await expect(executeRun(runPayload("x", { deadline: Date.now() - 1 }), model, ctx)).rejects.toThrow(
      "run aborted: deadline exceeded",
    );
    expect(model.requests).toHaveLength(0);
  });

  it("aborts while a tool call is pending, without waiting for it", async () => {
    const controller = new AbortController();
    const model = new PlaybackModel([
      { toolCalls: [{ id: "c1", name: "sessions_send", args: {} }] },
      { text: "never" },
    ]);
    const { ctx } = fakeRunContext(
      {
        sessions_send: () => {
          controller.abort();
          return new Promise(() => {});
        },
      },
      controller.signal,
    );
    await expect(executeRun(runPayload("x"), model, ctx)).rejects.toThrow(/^run aborted$/);
    expect(model.requests).toHaveLength(1);
  });

  it("a model error ends the run with that error; a failing progress report does not", async () => {
    const failing = new PlaybackModel([
      () => {
        throw new Error("model exploded");
      },
    ]);
    const { ctx } = fakeRunContext();
    await expect(executeRun(runPayload("x"), failing, ctx)).rejects.toThrow("model exploded");

    const fine = new PlaybackModel([{ text: "ok" }]);
    const ctx2 = { ...fakeRunContext().ctx, progress: () => Promise.reject(new Error("socket closed")) };
    expect(await executeRun(runPayload("x"), fine, ctx2)).toEqual({ reply: "ok" });
  });
});
