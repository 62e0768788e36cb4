import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { executeRun } from "../run/execute-run";
import { fakeRunContext, runPayload } from "../testing/run-fixtures";
import { loadScriptedRulesFile, parseScriptedRules } from "./load-scripted-rules";
import { ScriptedModelProvider } from "./scripted-provider";

const SPEC_YAML = `
rules:
  - when: "^ping$"                 # regex over the incoming message text
    reply: "pong"
  - when: "^ask (\\\\S+) (.+)$"
    call: {tool: sessions_send, args: {sessionKey: "$1", message: "$2", timeoutSeconds: 10}}
    reply: "they said: {{result.reply}}"
  - context: "Agent-to-agent reply step"
    reply: "REPLY_SKIP"
  - reply: "{{results.0.status}}"
`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agent-rules-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("loadScriptedRulesFile", () => {
  it("loads the documented YAML form and the rules drive a run", async () => {
    await writeFile(join(dir, "main.rules.yaml"), SPEC_YAML);
    const rules = await loadScriptedRulesFile("main.rules.yaml", dir);
    expect(rules).toHaveLength(4);
    expect(rules[1]?.call).toEqual({
      tool: "sessions_send",
      args: { sessionKey: "$1", message: "$2", timeoutSeconds: 10 },
    });
    expect(rules[3]?.reply).toBe("{{results.0.status}}");

    const { ctx, calls } = fakeRunContext({ sessions_send: () => ({ status: "ok", reply: "fine" }) });
    const result = await executeRun(
      runPayload("ask agent:b:main how?"),
      new ScriptedModelProvider(rules),
      ctx,
    );
    expect(calls[0]?.args).toEqual({ sessionKey: "agent:b:main", message: "how?", timeoutSeconds: 10 });
    expect(result.reply).toBe("they said: fine");
  });

  it("loads a JSON file holding a bare list, from an absolute path", async () => {
    const path = join(dir, "rules.json");
    await writeFile(path, JSON.stringify([{ when: "^hi$", reply: "hello" }]));
    expect(await loadScriptedRulesFile(path, "/elsewhere")).toEqual([{ when: "^hi$", reply: "hello" }]);
  });

  it("names the file and the bad field", async () => {
    const path = join(dir, "bad.yaml");
    await writeFile(path, "rules:\n  - reply: ok\n  - when: '(unclosed'\n    reply: x\n");
    await expect(loadScriptedRulesFile(path)).rejects.toThrow(
      `invalid scripted rules file ${path}:\n  rules[1].when: invalid regular expression`,
    );
  });

  it("reports an unreadable file and invalid YAML clearly", async () => {
    await expect(loadScriptedRulesFile("missing.yaml", dir)).rejects.toThrow(
      `cannot read scripted rules file ${join(dir, "missing.yaml")}`,
    );
    await writeFile(join(dir, "broken.yaml"), "rules: [\n  - {reply: x\n");
    await expect(loadScriptedRulesFile("broken.yaml", dir)).rejects.toThrow("not valid YAML or JSON");
  });
});

describe("parseScriptedRules", () => {
  it("refuses an object with other keys than rules, and a value that is not a list", () => {
    expect(() => parseScriptedRules({ rules: [], rulez: [] }, "f.yaml")).toThrow("rulez: unknown key");
    expect(() => parseScriptedRules("reply: x", "f.yaml")).toThrow("invalid f.yaml");
  });
});
