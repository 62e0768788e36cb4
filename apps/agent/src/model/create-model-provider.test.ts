import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OpenAIModelProvider } from "../openai/openai-provider";
import { executeRun } from "../run/execute-run";
import { ScriptedModelProvider } from "../scripted/scripted-provider";
import { fakeRunContext, runPayload } from "../testing/run-fixtures";
import { createModelProvider } from "./create-model-provider";
import type { ModelProvider } from "./model-types";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agent-model-"));
  await writeFile(join(dir, "main.rules.yaml"), 'rules:\n  - when: "^ping$"\n    reply: pong\n');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function replyOf(model: ModelProvider, message: string, context = ""): Promise<string> {
  return (await executeRun(runPayload(message, { context }), model, fakeRunContext().ctx)).reply;
}

describe("createModelProvider", () => {
  it("defaults to the scripted echo model, silent in agent-to-agent steps", async () => {
    for (const config of [undefined, { provider: "scripted" }]) {
      const model = await createModelProvider(config);
      expect(model).toBeInstanceOf(ScriptedModelProvider);
      expect(await replyOf(model, "hello")).toBe("echo: hello");
      expect(await replyOf(model, "x", "Agent-to-agent reply step:\nTurn 1 of 5.")).toBe("REPLY_SKIP");
    }
  });

  it("builds a scripted model from inline rules or a rules file relative to baseDir", async () => {
    const inline = await createModelProvider({ provider: "scripted", rules: [{ when: "^a$", reply: "b" }] });
    expect(await replyOf(inline, "a")).toBe("b");
    const fromFile = await createModelProvider(
      { provider: "scripted", rules: "./main.rules.yaml" },
      { baseDir: dir },
    );
    expect(await replyOf(fromFile, "ping")).toBe("pong");
  });

  it("builds an openai model", async () => {
    const model = await createModelProvider({
      provider: "openai",
      baseUrl: "http://127.0.0.1:11434/v1",
      model: "qwen3:8b",
    });
    expect(model).toBeInstanceOf(OpenAIModelProvider);
    expect(model.name).toBe("openai:qwen3:8b");
    expect(model.maxTextChars).toBe(8 * 1024 * 1024);
    const capped = await createModelProvider({
      provider: "openai",
      baseUrl: "http://127.0.0.1:11434/v1",
      model: "m",
      maxResponseBytes: 65_536,
    });
    expect(capped.maxTextChars).toBe(65_536);
  });

  it("refuses a bad entry, naming the path and the rule", async () => {
    const where = "agents.list[1].model";
    await expect(
      createModelProvider({ provider: "openai", baseUrl: "ftp://x", model: "m" }, { where }),
    ).rejects.toThrow(`invalid ${where}:\n  baseUrl: must be an http(s) URL`);
    await expect(
      createModelProvider(
        { provider: "scripted", rules: [{ reply: "ok" }, { when: "[", reply: "x" }] },
        { where },
      ),
    ).rejects.toThrow(/rules\[1\]\.when: invalid regular expression/);
    await expect(
      createModelProvider({ provider: "scripted", rules: [{ reply: "{{nope}}" }] }, { where }),
    ).rejects.toThrow(`invalid ${where}.rules:\n  rules[0].reply: unknown template variable {{nope}}`);
    await expect(createModelProvider({ provider: "llama" }, { where })).rejects.toThrow("provider");
    await expect(
      createModelProvider(
        { provider: "openai", baseUrl: "http://x/v1", model: "m", maxResponseBytes: 100 },
        { where },
      ),
    ).rejects.toThrow(`invalid ${where}:\n  maxResponseBytes: must be an integer >= 1024`);
  });
});
