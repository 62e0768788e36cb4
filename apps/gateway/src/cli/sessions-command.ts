import { SESSION_KINDS, type SessionRow } from "@switchboard/core";
import {
  CLIENT_OPTIONS,
  type CommandSpec,
  JSON_OPTION,
  listOption,
  numberOption,
  stringOption,
} from "./args";
import { EXIT } from "./cli-errors";
import type { Command } from "./command";
import { withOperator } from "./gateway-client";
import { messageText, provenanceText } from "./message-text";
import { ago, clock, formatTable, printJson, truncate } from "./output";
import { lacksWorker, noWorkerText } from "./worker-hint";

const CLIENT = { ...JSON_OPTION, ...CLIENT_OPTIONS };

const listSpec: CommandSpec = {
  name: "sessions list",
  summary: "Lists sessions, most recently updated first.",
  positionals: { min: 0, max: 0 },
  options: {
    agent: { type: "string", value: "ID", description: "only sessions of this agent" },
    kinds: {
      type: "string",
      value: "LIST",
      description: `only these kinds: ${SESSION_KINDS.join(",")}`,
    },
    search: { type: "string", value: "TEXT", description: "only keys, labels or names containing TEXT" },
    label: { type: "string", value: "LABEL", description: "only the session with this label" },
    "spawned-by": { type: "string", value: "KEY", description: "only sub-agents spawned by this session" },
    active: { type: "string", value: "MIN", description: "only sessions updated in the last MIN minutes" },
    limit: { type: "string", value: "N", description: "at most N rows (1-200, default 50)" },
    ...CLIENT,
  },
  details:
    "Examples:\n  switchboard sessions list\n  switchboard sessions list --agent research --kinds subagent --json",
};

const historySpec: CommandSpec = {
  name: "sessions history",
  summary: "Prints a session's transcript, oldest message first.",
  args: "<key>",
  positionals: { min: 1, max: 1 },
  options: {
    limit: { type: "string", value: "N", description: "the last N messages (1-500, default 50)" },
    tools: { type: "boolean", description: "include tool results" },
    before: { type: "string", value: "SEQ", description: "only messages before this seq (paging backwards)" },
    ...CLIENT,
  },
  details: "Example:\n  switchboard sessions history main --limit 20 --tools",
};

const keySpec = (name: string, summary: string, example: string): CommandSpec => ({
  name: `sessions ${name}`,
  summary,
  args: "<key>",
  positionals: { min: 1, max: 1 },
  options: CLIENT,
  details: `Example:\n  switchboard sessions ${name} ${example}`,
});

const statusSpec = keySpec(
  "status",
  "Shows a session's state: labels, taint, tokens, active run, children.",
  "main",
);
const resetSpec = keySpec(
  "reset",
  "Starts a session afresh: new sessionId, taint back to PUBLIC, settings kept, old transcript archived.",
  "agent:main:telegram:dm:42",
);
const deleteSpec = keySpec(
  "delete",
  "Deletes a session (the main session cannot be deleted).",
  "agent:main:cron:nightly",
);

const LIST_COLUMNS = [
  { header: "KEY", value: (row: SessionRow) => row.key, max: 64 },
  { header: "KIND", value: (row: SessionRow) => row.kind },
  { header: "CHANNEL", value: (row: SessionRow) => row.channel },
  { header: "TAINT", value: (row: SessionRow) => row.taint },
  { header: "CLEARANCE", value: (row: SessionRow) => row.clearance },
  { header: "UPDATED", value: (row: SessionRow) => ago(row.updatedAt) },
  { header: "LABEL", value: (row: SessionRow) => row.label ?? row.displayName ?? "" },
];

export const sessionsListCommand: Command = {
  spec: listSpec,
  async run({ io, args }) {
    const { values } = args;
    const limit = numberOption(listSpec, values, "limit", { min: 1, max: 200, integer: true });
    const active = numberOption(listSpec, values, "active", { min: 1, max: 10_000_000, unit: "minutes" });
    const kinds = listOption(listSpec, values, "kinds", SESSION_KINDS);
    const agentId = stringOption(values, "agent");
    const search = stringOption(values, "search");
    const label = stringOption(values, "label");
    const spawnedBy = stringOption(values, "spawned-by");
    return withOperator(io, values, async (client) => {
      const result = await client.sessions.list({
        ...(limit !== undefined ? { limit } : {}),
        ...(active !== undefined ? { activeMinutes: active } : {}),
        ...(kinds ? { kinds } : {}),
        ...(agentId ? { agentId } : {}),
        ...(search ? { search } : {}),
        ...(label ? { label } : {}),
        ...(spawnedBy ? { spawnedBy } : {}),
      });
      if (values.json) {
        printJson(io, result);
        return EXIT.ok;
      }
      if (result.sessions.length === 0) io.out("no sessions");
      else io.out(formatTable(result.sessions, LIST_COLUMNS));
      const hidden = result.hidden > 0 ? `, ${result.hidden} hidden` : "";
      io.err(`${result.count} session${result.count === 1 ? "" : "s"}${hidden}`);
      return EXIT.ok;
    });
  },
};

export const sessionsHistoryCommand: Command = {
  spec: historySpec,
  async run({ io, args }) {
    const { values } = args;
    const sessionKey = args.positionals[0]!;
    const limit = numberOption(historySpec, values, "limit", { min: 1, max: 500, integer: true });
    const before = numberOption(historySpec, values, "before", {
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      integer: true,
    });
    return withOperator(io, values, async (client) => {
      const result = await client.sessions.history({
        sessionKey,
        ...(limit !== undefined ? { limit } : {}),
        ...(before !== undefined ? { before } : {}),
        ...(values.tools ? { includeTools: true } : {}),
      });
      if (values.json) {
        printJson(io, result);
        return EXIT.ok;
      }
      io.err(`${result.sessionKey} (sessionId ${result.sessionId})`);
      if (result.messages.length === 0) io.out("no messages");
      else
        io.out(
          formatTable(result.messages, [
            { header: "SEQ", value: (m) => String(m.seq) },
            { header: "TIME", value: (m) => clock(m.ts) },
            { header: "ROLE", value: (m) => m.role },
            { header: "LABEL", value: (m) => m.label },
            { header: "FROM", value: (m) => provenanceText(m), max: 48 },
            { header: "TEXT", value: (m) => truncate(messageText(m), 400), max: 400 },
          ]),
        );
      if (result.truncated && result.nextBefore !== undefined) {
        io.err(
          `older messages left out; more with: switchboard sessions history ${sessionKey} --before ${result.nextBefore}`,
        );
      }
      return EXIT.ok;
    });
  },
};

export const sessionsStatusCommand: Command = {
  spec: statusSpec,
  async run({ io, args }) {
    return withOperator(io, args.values, async (client) => {
      const status = await client.sessions.status({ sessionKey: args.positionals[0]! });
      if (args.values.json) {
        printJson(io, status);
        return EXIT.ok;
      }
      // Without a worker, runs wait queued and status shows no active run, which reads as "idle":
      // say why nothing happens and what starts it.
      const noWorker = !status.activeRun && (await lacksWorker(client, status.agentId));
      const rows: Array<[string, string | undefined]> = [
        ["key", status.sessionKey],
        ["sessionId", status.sessionId],
        ["agent", status.agentId],
        ["kind", status.kind],
        ["channel", status.channel],
        ["taint", status.taint],
        ["clearance", status.clearance],
        ["label", status.label],
        ["display name", status.displayName],
        ["model", status.model],
        ["send policy", status.sendPolicy ?? "inherit"],
        ["spawned by", status.spawnedBy],
        ["tokens", status.totalTokens !== undefined ? String(status.totalTokens) : undefined],
        ["created", `${new Date(status.createdAt).toISOString()} (${ago(status.createdAt)})`],
        ["updated", `${new Date(status.updatedAt).toISOString()} (${ago(status.updatedAt)})`],
        [
          "active run",
          status.activeRun
            ? `${status.activeRun.runId} on lane ${status.activeRun.lane} since ${ago(status.activeRun.startedAt)}`
            : noWorker
              ? `none: ${noWorkerText(status.agentId)}`
              : "none",
        ],
        ["queued runs", status.queuedRuns ? String(status.queuedRuns) : undefined],
      ];
      const shown = rows.filter((row): row is [string, string] => row[1] !== undefined);
      const width = Math.max(...shown.map(([name]) => name.length));
      io.out(shown.map(([name, value]) => `${`${name}:`.padEnd(width + 1)}  ${value}`).join("\n"));
      if (status.children?.length) {
        io.out("children:");
        for (const child of status.children) {
          io.out(
            `  ${child.key}  ${child.status}${child.label ? `  "${child.label}"` : ""}${child.runId ? `  run ${child.runId}` : ""}`,
          );
        }
      }
      return EXIT.ok;
    });
  },
};

export const sessionsResetCommand: Command = {
  spec: resetSpec,
  async run({ io, args }) {
    return withOperator(io, args.values, async (client) => {
      const result = await client.sessions.reset({ key: args.positionals[0]! });
      if (args.values.json) printJson(io, result);
      else
        io.out(
          `reset ${result.key}: new sessionId ${result.sessionId} (taint PUBLIC, old transcript archived)`,
        );
      return EXIT.ok;
    });
  },
};

export const sessionsDeleteCommand: Command = {
  spec: deleteSpec,
  async run({ io, args }) {
    return withOperator(io, args.values, async (client) => {
      const result = await client.sessions.delete({ key: args.positionals[0]! });
      if (args.values.json) printJson(io, result);
      else io.out(`deleted ${result.key}`);
      return EXIT.ok;
    });
  },
};
