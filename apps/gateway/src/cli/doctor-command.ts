import { stat } from "node:fs/promises";
import { join } from "node:path";
import { checkDataDir, type DoctorIssue } from "@switchboard/store-fs";
import { loadConfig, resolveDataDir } from "../config-loader";
import { CONFIG_OPTIONS, type CommandSpec, JSON_OPTION, stringOption } from "./args";
import { EXIT } from "./cli-errors";
import type { Command } from "./command";
import { printJson, withProgress } from "./output";

const spec: CommandSpec = {
  name: "doctor",
  brief: "read-only check of the config and the data dir",
  summary:
    "Checks the config and the data dir without changing anything: store format, locks, torn or orphan files, transcripts, secret file permissions. Safe while the gateway runs. Exit 1 when something is broken.",
  positionals: { min: 0, max: 0 },
  options: { ...JSON_OPTION, ...CONFIG_OPTIONS },
  details: "Examples:\n  switchboard doctor\n  switchboard doctor --data-dir ./.switchboard --json",
};

/** Secret files the gateway keeps in its data dir; anyone but the owner reading them is a problem. */
const SECRET_FILES = ["operator-token", "audit.key"];

type Issue = Omit<DoctorIssue, "code"> & { code: string };

async function secretFileIssues(dataDir: string): Promise<Issue[]> {
  const issues: Issue[] = [];
  for (const name of SECRET_FILES) {
    const path = join(dataDir, name);
    try {
      const mode = (await stat(path)).mode & 0o777;
      if ((mode & 0o077) !== 0) {
        issues.push({
          severity: "warning",
          code: "secret-file-mode",
          message: `${name} is readable by others (mode ${mode.toString(8)}); run: chmod 600 ${path}`,
          path,
        });
      }
    } catch {
      // Absent before the first start: nothing to protect yet.
    }
  }
  return issues;
}

const SYMBOLS: Record<DoctorIssue["severity"], string> = { error: "✗", warning: "!", info: "·" };

export const doctorCommand: Command = {
  spec,
  async run({ io, args }) {
    const loaded = await loadConfig(stringOption(args.values, "config"));
    const dataDir = resolveDataDir(loaded.config, stringOption(args.values, "data-dir"));
    const report = await withProgress(io, `checking ${dataDir}`, () => checkDataDir(dataDir));
    const issues: Issue[] = [...report.issues, ...(await secretFileIssues(dataDir))];
    if (args.values.json) {
      printJson(io, { config: loaded.path ?? null, ...report, issues });
      return report.ok ? EXIT.ok : EXIT.failure;
    }
    io.out(`config:    ${loaded.path ?? "(built-in defaults)"} — valid`);
    io.out(`data dir:  ${report.dataDir}`);
    if (report.formatVersion !== undefined) io.out(`format:    version ${report.formatVersion}`);
    const counts = report.counts;
    io.out(
      `contents:  ${counts.sessions} sessions, ${counts.runs} runs, ${counts.transcripts} transcripts (${counts.archivedTranscripts} archived), ${counts.pendingCommitEntries} pending commit entries`,
    );
    if (issues.length === 0) io.out("no problems found");
    for (const issue of issues) {
      io.out(`${SYMBOLS[issue.severity]} ${issue.severity.padEnd(7)} ${issue.code}: ${issue.message}`);
    }
    io.out(report.ok ? "ok" : "the store has errors (see above)");
    return report.ok ? EXIT.ok : EXIT.failure;
  },
};
