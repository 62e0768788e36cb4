import { describe, expect, it } from "vitest";
import { isSwitchboardError, type SwitchboardError } from "../errors";
import { configJsonSchema, defaultConfig, parseConfig } from "./parse-config";

/** The example of config.md, with real tokens. */
function exampleConfig() {
  return {
    gateway: {
      host: "127.0.0.1",
      port: 18789,
      dataDir: "./.switchboard",
      limits: { maxPayload: 1048576, maxBufferedBytes: 8388608, heartbeatMs: 15000 },
    },
    auth: {
      tokens: [
        { name: "ops", token: "ops-0123456789abcdef", role: "operator" },
        { name: "worker", token: "worker-0123456789abcdef", role: "agent", agents: ["main", "research"] },
        {
          name: "webchat",
          token: "webchat-0123456789abcdef",
          role: "client",
          sessions: ["agent:main:webchat:dm:*"],
        },
      ],
    },
    session: {
      mainKey: "main",
      scope: "per-sender",
      sendPolicy: {
        default: "allow",
        rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }],
      },
      agentToAgent: { maxPingPongTurns: 5, maxHops: 4, budgetPerMinute: 30 },
    },
    agents: {
      defaults: {
        clearance: "CONFIDENTIAL",
        timeoutSeconds: 600,
        subagents: { model: null, archiveAfterMinutes: 60, maxSpawnDepth: 1, maxChildren: 5 },
        sandbox: { sessionToolsVisibility: "spawned" },
      },
      list: [
        {
          id: "main",
          default: true,
          model: { provider: "scripted", rules: "./agents/main.rules.yaml" },
          subagents: { allowAgents: ["research"] },
        },
        {
          id: "research",
          clearance: "PUBLIC",
          sandboxed: true,
          model: {
            provider: "openai",
            baseUrl: "http://127.0.0.1:11434/v1",
            model: "qwen3:8b",
            apiKeyEnv: "OPENAI_API_KEY",
          },
        },
      ],
    },
    tools: {
      agentToAgent: { enabled: true, allow: ["main", "research"] },
      subagents: { tools: { deny: [], allow: null } },
    },
    labels: {
      channels: { discord: "PUBLIC", telegram: "INTERNAL", webchat: "CONFIDENTIAL", internal: "RESTRICTED" },
      recipients: { "telegram:42": "CONFIDENTIAL" },
      tools: { web_fetch: "PUBLIC" },
    },
    policy: {
      default: "allow",
      rules: [
        {
          id: "no-keys-out",
          hook: "PRE_OUTPUT",
          priority: 100,
          action: "redact",
          redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
        },
      ],
    },
    logging: { level: "info", pretty: false },
  };
}

function configError(input: unknown): SwitchboardError {
  try {
    parseConfig(input);
  } catch (error) {
    if (isSwitchboardError(error)) return error;
    throw error;
  }
  throw new Error("expected parseConfig to throw");
}

function issuesOf(input: unknown): { path: string; message: string }[] {
  return (configError(input).details as { issues: { path: string; message: string }[] }).issues;
}

describe("parseConfig", () => {
  it("accepts the full example of the spec", () => {
    const config = parseConfig(exampleConfig());
    expect(config.auth.tokens.map((t) => t.role)).toEqual(["operator", "agent", "client"]);
    expect(config.agents.list.map((a) => a.id)).toEqual(["main", "research"]);
    const research = config.agents.list[1]!;
    expect(research.model).toEqual({
      provider: "openai",
      baseUrl: "http://127.0.0.1:11434/v1",
      model: "qwen3:8b",
      apiKeyEnv: "OPENAI_API_KEY",
      stream: true,
    });
    expect(config.agents.list[0]!.model).toEqual({ provider: "scripted", rules: "./agents/main.rules.yaml" });
    expect(config.policy.rules[0]).toMatchObject({ id: "no-keys-out", priority: 100, action: "redact" });
    expect(config.policy.hookBudgetMs).toBe(50);
    expect(config.session.sendPolicy?.rules?.[0]?.match).toEqual({ channel: "discord", chatType: "group" });
    expect(config.tools.agentToAgent).toEqual({ enabled: true, allow: ["main", "research"] });
    expect(config.labels.recipients).toEqual({ "telegram:42": "CONFIDENTIAL" });
  });

  it("fills every default from an empty config", () => {
    const config = parseConfig({});
    expect(config.gateway).toEqual({
      host: "127.0.0.1",
      port: 18789,
      dataDir: "./.switchboard",
      limits: {
        maxPayload: 1048576,
        maxBufferedBytes: 8388608,
        heartbeatMs: 15000,
        maxPreConnectBytes: 16384,
        maxConnectionsPerAddress: 512,
        maxInFlight: 256,
        maxReplayBytes: 67108864,
        maxQueuedReplayBytes: 67108864,
        maxRunsPerSession: 1000,
        maxRuns: 100000,
        maxRunInputBytes: 268435456,
      },
      shutdown: { drainMs: 5000, timeoutMs: 30000 },
      retention: { runsDays: 7, archiveDays: 30 },
    });
    expect(config.session).toEqual({
      mainKey: "main",
      scope: "per-sender",
      agentToAgent: { maxPingPongTurns: 5, maxHops: 4, budgetPerMinute: 30 },
    });
    expect(config.agents.defaults).toEqual({
      clearance: "RESTRICTED",
      timeoutSeconds: 600,
      subagents: { model: null, archiveAfterMinutes: 60, maxSpawnDepth: 1, maxChildren: 5 },
      sandbox: { sessionToolsVisibility: "spawned" },
    });
    expect(config.tools).toEqual({
      agentToAgent: { enabled: false, allow: [] },
      subagents: { tools: { deny: [], allow: null } },
    });
    expect(config.policy).toEqual({ default: "allow", rules: [], hookBudgetMs: 50 });
    expect(config.logging).toEqual({ level: "info", pretty: false });
    expect(config.auth.tokens).toEqual([]);
  });

  it("gives a working default: one default agent main on the scripted model", () => {
    const config = defaultConfig();
    expect(config.agents.list).toHaveLength(1);
    const main = config.agents.list[0]!;
    expect(main).toMatchObject({ id: "main", default: true, model: { provider: "scripted" } });
    expect(Array.isArray(main.model?.provider === "scripted" && main.model.rules)).toBe(true);
    // Fresh objects each time, so one caller mutating its config cannot change another's.
    expect(defaultConfig().agents.list[0]).not.toBe(main);
  });

  it("lower-cases agent ids", () => {
    const config = parseConfig({ agents: { list: [{ id: "Research" }] }, auth: { tokens: [] } });
    expect(config.agents.list[0]!.id).toBe("research");
  });

  it("names the path and reason of each typo, one line per problem", () => {
    const error = configError({
      gateway: { prot: 8080 },
      agents: { list: [{ id: "main", subagents: { maxSpawnDepth: 9 } }] },
      labels: { channels: { discord: "public" } },
    });
    expect(error.code).toBe("INVALID_REQUEST");
    const lines = error.message
      .split("\n")
      .slice(1)
      .map((line) => line.trim());
    expect(lines).toEqual([
      'gateway.prot: unknown key (did you mean "port"?)',
      "agents.list[0].subagents.maxSpawnDepth: must be an integer from 0 to 5",
      "labels.channels.discord: must be one of PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED",
    ]);
    expect(error.details).toEqual({
      issues: [
        { path: "gateway.prot", message: 'unknown key (did you mean "port"?)' },
        { path: "agents.list[0].subagents.maxSpawnDepth", message: "must be an integer from 0 to 5" },
        {
          path: "labels.channels.discord",
          message: "must be one of PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED",
        },
      ],
    });
  });

  // Before session 22 a typo in `deny` was accepted and left the tool it meant open to sub-agents.
  it("refuses a sub-agent tool pattern that matches none of the session tools", () => {
    expect(
      issuesOf({ tools: { subagents: { tools: { allow: ["sessions_*"], deny: ["sesions_send"] } } } }),
    ).toEqual([
      {
        path: "tools.subagents.tools.deny[0]",
        message: expect.stringMatching(
          /^"sesions_send" matches none of the session tools \(did you mean "sessions_send"\? tools: sessions_list, /,
        ),
      },
    ]);
    expect(() =>
      parseConfig({ tools: { subagents: { tools: { allow: ["Sessions_*", " message "], deny: ["*"] } } } }),
    ).not.toThrow();
  });

  it("refuses a path-like main key", () => {
    expect(issuesOf({ session: { mainKey: ".." } })).toEqual([
      { path: "session.mainKey", message: 'must not be "." or ".."' },
    ]);
  });

  it("reports an unknown key without a suggestion when nothing is close", () => {
    expect(issuesOf({ zzzqqq: true })).toEqual([{ path: "zzzqqq", message: "unknown key" }]);
    expect(issuesOf({ agents: { list: [{ id: "main", modle: {} }] } })).toEqual([
      { path: "agents.list[0].modle", message: 'unknown key (did you mean "model"?)' },
    ]);
  });

  it("explains wrong types, missing fields and bad values in plain words", () => {
    expect(issuesOf(5)).toEqual([{ path: "", message: "must be an object" }]);
    expect(issuesOf({ gateway: { port: "18789" } })).toEqual([
      { path: "gateway.port", message: "must be an integer from 0 to 65535" },
    ]);
    expect(issuesOf({ logging: { level: "verbose" } })[0]!.message).toBe(
      'must be one of "trace", "debug", "info", "warn", "error", "fatal", "silent"',
    );
    expect(issuesOf({ auth: { tokens: [{ name: "ops", role: "operator" }] } })).toEqual([
      { path: "auth.tokens[0].token", message: "is required" },
    ]);
    expect(issuesOf({ auth: { tokens: [{ name: "ops", token: "short", role: "operator" }] } })[0]).toEqual({
      path: "auth.tokens[0].token",
      message: "must be at least 16 characters (use a long random secret)",
    });
    expect(issuesOf({ agents: { list: [{ id: "no spaces" }] } })[0]!.path).toBe("agents.list[0].id");
    expect(issuesOf({ session: { agentToAgent: { maxHops: 0 } } })).toEqual([
      { path: "session.agentToAgent.maxHops", message: "must be an integer from 1 to 16" },
    ]);
  });

  it("validates model configs by provider", () => {
    const issues = issuesOf({
      agents: {
        list: [
          { id: "a", model: { provider: "openai", baseUrl: "not a url", model: "m" } },
          { id: "b", model: { provider: "anthropic" } },
          { id: "c", model: "gpt-4o" },
        ],
      },
    });
    expect(issues).toEqual([
      {
        path: "agents.list[0].model.baseUrl",
        message: "must be an http(s) URL, e.g. http://127.0.0.1:11434/v1",
      },
      { path: "agents.list[1].model.provider", message: 'must be one of "scripted", "openai"' },
      { path: "agents.list[2].model", message: 'must be a model config object, e.g. {provider: "scripted"}' },
    ]);
  });

  it("rejects a scripted rule with a bad regex, naming the rule's path", () => {
    const issues = issuesOf({
      agents: {
        list: [
          {
            id: "main",
            model: {
              provider: "scripted",
              rules: [
                { when: "^ok$", reply: "ok" },
                { when: "^ask (", reply: "x" },
              ],
            },
          },
        ],
      },
    });
    expect(issues).toHaveLength(1);
    expect(issues[0]!.path).toBe("agents.list[0].model.rules[1].when");
    expect(issues[0]!.message).toMatch(/^invalid regular expression: .*unterminated group/i);
  });

  it("rejects duplicate agent ids (case-insensitively) and a second default", () => {
    expect(
      issuesOf({
        agents: { list: [{ id: "main", default: true }, { id: "research" }, { id: "Main", default: true }] },
      }),
    ).toEqual([
      { path: "agents.list[2].id", message: 'duplicate agent id "main" (also agents.list[0])' },
      {
        path: "agents.list[2].default",
        message: "only one agent may be the default (agents.list[0] already is)",
      },
    ]);
  });

  it("rejects duplicate tokens and role-specific fields on the wrong role", () => {
    const secret = "0123456789abcdef0123";
    expect(
      issuesOf({
        auth: {
          tokens: [
            { name: "ops", token: secret, role: "operator", agents: ["main"] },
            { name: "ops", token: secret, role: "agent", sessions: ["agent:main:*"] },
          ],
        },
      }),
    ).toEqual([
      {
        path: "auth.tokens[0].agents",
        message: 'only allowed on a token with role "agent" (this one is "operator")',
      },
      { path: "auth.tokens[1].name", message: 'duplicate token name "ops" (also auth.tokens[0])' },
      {
        path: "auth.tokens[1].token",
        message: "same token value as auth.tokens[0]; every token must be unique",
      },
      {
        path: "auth.tokens[1].sessions",
        message: 'only allowed on a token with role "client" (this one is "agent")',
      },
    ]);
    // The secret never appears in the error (it would end up in logs).
    expect(
      configError({
        auth: {
          tokens: [
            { name: "a", token: secret, role: "operator" },
            { name: "b", token: secret, role: "operator" },
          ],
        },
      }).message,
    ).not.toContain(secret);
  });

  it("binds an mcp token to one canonical session of a configured agent", () => {
    const config = parseConfig({
      auth: {
        tokens: [
          { name: "desktop", token: "mcp-0123456789abcdef", role: "mcp", session: "agent:main:mcp:desktop" },
        ],
      },
    });
    expect(config.auth.tokens[0]).toMatchObject({ role: "mcp", session: "agent:main:mcp:desktop" });
    const token = (name: string, extra: Record<string, unknown>) => ({
      name,
      token: `${name}-0123456789abcdef`,
      ...extra,
    });
    expect(
      issuesOf({
        agents: { list: [{ id: "main", default: true }, { id: "research" }] },
        auth: {
          tokens: [
            token("none", { role: "mcp" }),
            token("bare", { role: "mcp", session: "mcp:desktop" }),
            token("spaces", { role: "mcp", session: "agent:main:mcp desktop" }),
            token("internal", { role: "mcp", session: "agent:main:global" }),
            token("typo", { role: "mcp", session: "agent:reseach:mcp:x" }),
            token("client", { role: "client", sessions: ["agent:main:*"], session: "agent:main:mcp:x" }),
          ],
        },
      }),
    ).toEqual([
      {
        path: "auth.tokens[0].session",
        message:
          'required for a token with role "mcp": the session key it acts as, e.g. "agent:main:mcp:desktop"',
      },
      {
        path: "auth.tokens[1].session",
        message:
          'must be a canonical key agent:<agentId>:<rest> with a lower-case agent id (got "mcp:desktop")',
      },
      { path: "auth.tokens[2].session", message: "must not contain whitespace" },
      {
        path: "auth.tokens[3].session",
        message: '"global" is an internal key and cannot be bound to a token',
      },
      {
        path: "auth.tokens[4].session",
        message: 'unknown agent "reseach" (did you mean "research"? configured agents: main, research)',
      },
      {
        path: "auth.tokens[5].session",
        message: 'only allowed on a token with role "mcp" (this one is "client")',
      },
    ]);
  });

  it("checks that agent ids named elsewhere are configured, allowing patterns", () => {
    expect(
      issuesOf({
        agents: { list: [{ id: "main", subagents: { allowAgents: ["research", "res*", "*"] } }] },
        auth: {
          tokens: [{ name: "w", token: "worker-0123456789abcdef", role: "agent", agents: ["helper"] }],
        },
      }),
    ).toEqual([
      {
        path: "agents.list[0].subagents.allowAgents[0]",
        message: 'unknown agent "research" (configured agents: main)',
      },
      { path: "auth.tokens[0].agents[0]", message: 'unknown agent "helper" (configured agents: main)' },
    ]);
  });

  it("rejects an agent-to-agent allow entry that names no configured agent, with a did-you-mean", () => {
    expect(
      issuesOf({
        agents: { list: [{ id: "main", default: true }, { id: "research" }] },
        tools: { agentToAgent: { enabled: true, allow: ["main", "ghost", "reseach", "res*", "*", "?ain"] } },
      }),
    ).toEqual([
      {
        path: "tools.agentToAgent.allow[1]",
        message: 'unknown agent "ghost" (configured agents: main, research)',
      },
      {
        path: "tools.agentToAgent.allow[2]",
        message: 'unknown agent "reseach" (did you mean "research"? configured agents: main, research)',
      },
    ]);
    // Ids are case-insensitive: an upper-case spelling of a configured agent is that agent.
    expect(() =>
      parseConfig({
        agents: { list: [{ id: "main" }, { id: "research" }] },
        tools: { agentToAgent: { allow: ["Research"] } },
      }),
    ).not.toThrow();
  });

  it("suggests the closest configured agent for a misspelt id in allowAgents and token agents", () => {
    expect(
      issuesOf({
        agents: { list: [{ id: "main", subagents: { allowAgents: ["mian"] } }, { id: "research" }] },
        auth: {
          tokens: [{ name: "w", token: "worker-0123456789abcdef", role: "agent", agents: ["researh"] }],
        },
      }).map((issue) => issue.message),
    ).toEqual([
      'unknown agent "mian" (did you mean "main"? configured agents: main, research)',
      'unknown agent "researh" (did you mean "research"? configured agents: main, research)',
    ]);
  });

  it("rejects invalid policy rules, naming the rule id and the reason", () => {
    const issues = issuesOf({
      policy: {
        rules: [
          { id: "no-keys-out", hook: "PRE_OUTPUT", action: "redact", redact: { patterns: ["sk-[A-Z"] } },
          { id: "typo-hook", hook: "PRE_SENT", action: "deny" },
        ],
      },
    });
    expect(issues.map((i) => i.path)).toEqual(["policy.rules[0].redact.patterns[0]", "policy.rules[1].hook"]);
    expect(issues[0]!.message).toMatch(/^rule "no-keys-out": invalid regular expression/);
    expect(issues[1]!.message).toMatch(/^rule "typo-hook": must be one of PRE_TOOL_CALL/);
  });

  it("reports every problem at once", () => {
    expect(issuesOf({ gateway: { port: -1, host: "" }, logging: { pretty: "yes" } })).toHaveLength(3);
  });
});

describe("configJsonSchema", () => {
  it("exports the input schema for editors, with defaults and closed objects", () => {
    const schema = configJsonSchema() as {
      type: string;
      additionalProperties: boolean;
      properties: Record<
        string,
        { properties?: Record<string, { default?: unknown }>; additionalProperties?: boolean }
      >;
    };
    expect(schema.type).toBe("object");
    expect(schema.additionalProperties).toBe(false);
    expect(schema.properties.gateway?.additionalProperties).toBe(false);
    expect(schema.properties.gateway?.properties?.port?.default).toBe(18789);
    expect(Object.keys(schema.properties)).toEqual(
      expect.arrayContaining([
        "gateway",
        "auth",
        "session",
        "agents",
        "tools",
        "labels",
        "policy",
        "logging",
      ]),
    );
    const text = JSON.stringify(schema);
    expect(text).toContain('"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"');
    expect(text).toContain('"openai"');
    expect(JSON.parse(text)).toEqual(schema);
  });
});
