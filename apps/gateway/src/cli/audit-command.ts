import { CLIENT_OPTIONS, type CommandSpec, JSON_OPTION, numberOption } from "./args";
import { CliError, EXIT } from "./cli-errors";
import type { Command } from "./command";
import { withOperator } from "./gateway-client";
import { compactJson } from "./message-text";
import { formatTable, printJson } from "./output";

const verifySpec: CommandSpec = {
  name: "audit verify",
  brief: "check the audit log's hash chain",
  summary:
    "Checks the audit log's hash chain: a changed, removed, reordered or inserted entry is reported with the first bad index (exit 1).",
  positionals: { min: 0, max: 0 },
  options: { ...JSON_OPTION, ...CLIENT_OPTIONS },
  details: "Example:\n  switchboard audit verify",
};

const tailSpec: CommandSpec = {
  name: "audit tail",
  brief: "the latest audit entries",
  summary:
    "Prints the latest audit entries: blocks, redactions, deliveries, spawns, taint rises, impersonations.",
  positionals: { min: 0, max: 0 },
  options: {
    limit: { type: "string", value: "N", description: "the last N entries (1-1000, default 20)" },
    after: { type: "string", value: "INDEX", description: "the entries after this index instead" },
    ...JSON_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: "Example:\n  switchboard audit tail --limit 50",
};

export const auditVerifyCommand: Command = {
  spec: verifySpec,
  async run({ io, args }) {
    return withOperator(io, args.values, async (client) => {
      const result = await client.audit.verify({});
      if (args.values.json) printJson(io, result);
      if (result.ok) {
        if (!args.values.json)
          io.out(`audit log intact: ${result.entries} entr${result.entries === 1 ? "y" : "ies"} verified`);
        return EXIT.ok;
      }
      throw new CliError(
        `audit log damaged at entry #${result.firstBadIndex ?? "?"} of ${result.entries}${result.reason ? `: ${result.reason}` : ""}`,
        EXIT.failure,
      );
    });
  },
};

export const auditTailCommand: Command = {
  spec: tailSpec,
  async run({ io, args }) {
    const limit = numberOption(tailSpec, args.values, "limit", { min: 1, max: 1000, integer: true });
    const after = numberOption(tailSpec, args.values, "after", {
      min: -1,
      max: Number.MAX_SAFE_INTEGER,
      integer: true,
    });
    return withOperator(io, args.values, async (client) => {
      const { entries } = await client.audit.tail({
        limit: limit ?? 20,
        ...(after !== undefined ? { after } : {}),
      });
      if (args.values.json) {
        printJson(io, { entries });
        return EXIT.ok;
      }
      if (entries.length === 0) {
        io.out("no audit entries");
        return EXIT.ok;
      }
      io.out(
        formatTable(entries, [
          { header: "#", value: (entry) => String(entry.index ?? "") },
          {
            header: "AT",
            value: (entry) => (typeof entry.at === "number" ? new Date(entry.at).toISOString() : ""),
          },
          { header: "KIND", value: (entry) => String(entry.kind ?? "") },
          { header: "ACTOR", value: (entry) => String(entry.actor ?? "") },
          { header: "SESSION", value: (entry) => String(entry.sessionKey ?? ""), max: 48 },
          { header: "DATA", value: (entry) => compactJson(entry.data ?? {}), max: 120 },
        ]),
      );
      return EXIT.ok;
    });
  },
};
