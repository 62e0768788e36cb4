import { open, readFile, stat } from "node:fs/promises";
import { isAbsolute, join, resolve } from "node:path";
import { type LoadedConfig, loadConfig, resolveDataDir } from "@switchboard/config-loader";
import { type Config, defaultConfig } from "@switchboard/core";
import type { DoctorIssue, DoctorReport } from "@switchboard/store-fs";
import type { PostgresCheck } from "@switchboard/store-pg";
import { auditKeyDamage, operatorTokenDamage } from "../data-dir-secrets";
import { CONFIG_OPTIONS, type CommandSpec, JSON_OPTION, stringOption } from "./args";
import { EXIT, errorMessage } from "./cli-errors";
import type { Command } from "./command";
import { printJson, withProgress } from "./output";

const spec: CommandSpec = {
  name: "doctor",
  brief: "check the config and the data dir (--repair fixes what it can)",
  summary:
    'Checks the config (as `up` loads it, scripted rules files included) and the data dir without changing anything: store format, locks, torn, damaged or orphan files, the sessions index, transcripts, runs waiting on a transcript that is gone, secret file permissions. Every error names the file and the fix. On a postgres store (store.kind "postgres") it checks the connection and the schema version instead of the store files. Safe while the gateway runs. With --repair (gateway stopped) it fixes what it can and keeps every replaced file. Exit 1 when something is still broken.',
  positionals: { min: 0, max: 0 },
  options: {
    ...JSON_OPTION,
    ...CONFIG_OPTIONS,
    repair: {
      type: "boolean",
      description:
        "fix what can be fixed (stop the gateway first): drop damaged lines, rebuild a lost index, restore or archive transcripts, fail runs whose transcript is gone",
    },
  },
  details:
    "Examples:\n  switchboard doctor\n  switchboard doctor --data-dir ./.switchboard --json\n  switchboard doctor --repair",
};

/** Secret files the gateway keeps in its data dir; anyone but the owner reading them is a problem. */
const SECRET_FILES = ["operator-token", "audit.key"] as const;

type Issue = Omit<DoctorIssue, "code"> & { code: string };

async function secretFileIssues(dataDir: string): Promise<Issue[]> {
  const issues: Issue[] = [];
  for (const name of SECRET_FILES) {
    const path = join(dataDir, name);
    let content: Buffer;
    try {
      const stats = await stat(path);
      const mode = stats.mode & 0o777;
      if (!stats.isDirectory() && (mode & 0o077) !== 0) {
        issues.push({
          severity: "warning",
          code: "secret-file-mode",
          message: `${name} is readable by others (mode ${mode.toString(8)})`,
          path,
          fix: `chmod 600 ${path}`,
        });
      }
      content = await readFile(path);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ENOENT") {
        // Absent before the first start: nothing to protect yet. Absent with records chained with
        // it: the gateway refuses to make a new one in its place.
        if (name === "audit.key" && (await auditLogHasRecords(dataDir)))
          issues.push({
            severity: "error",
            code: "missing-audit-key",
            message:
              "audit.key is missing, but the audit log holds records chained with it; the gateway refuses to start",
            path,
            fix: `restore ${path} from a backup; to go on without it, write a new key there (head -c 32 /dev/urandom > ${path}): the records made before then fail \`switchboard audit verify\``,
          });
        continue;
      }
      issues.push({
        severity: "error",
        code: "unreadable-secret-file",
        message:
          code === "EISDIR"
            ? `${name} is a directory, not a file; the gateway refuses to start`
            : `cannot read ${name} (${code ?? errorMessage(error)}); the gateway refuses to start`,
        path,
        fix:
          code === "EISDIR"
            ? `move ${path} away (the gateway creates a new ${name} at its next start)`
            : `make it readable by the gateway's user: chmod 600 ${path}`,
      });
      continue;
    }
    // The checks the gateway makes when it reads them: a damaged secret stops its start.
    const damage =
      name === "operator-token"
        ? operatorTokenDamage(content.toString("utf8").trim(), path)
        : auditKeyDamage(content.length, path);
    if (damage) {
      issues.push({
        severity: "error",
        code: "damaged-secret-file",
        message: `${damage.problem}; the gateway refuses to start`,
        path,
        fix: damage.fix,
      });
    }
  }
  return issues;
}

/** Whether the file store's audit log holds a record (a line after its header). */
async function auditLogHasRecords(dataDir: string): Promise<boolean> {
  let file: Awaited<ReturnType<typeof open>> | undefined;
  try {
    file = await open(join(dataDir, "audit", "audit.jsonl"), "r");
    const head = Buffer.alloc(64 * 1024);
    const { bytesRead } = await file.read(head, 0, head.length, 0);
    const firstEnd = head.indexOf(10);
    return firstEnd >= 0 && firstEnd + 1 < bytesRead && head[firstEnd + 1] !== 10;
  } catch {
    return false;
  } finally {
    await file?.close();
  }
}

/** What `up` would trip over once the agents load: scripted rules files that are missing or invalid. */
async function rulesFileIssues(config: Config, baseDir: string | undefined): Promise<Issue[]> {
  const issues: Issue[] = [];
  for (const [index, agent] of config.agents.list.entries()) {
    const model = agent.model;
    if (model?.provider !== "scripted" || typeof model.rules !== "string") continue;
    const file = isAbsolute(model.rules) ? model.rules : resolve(baseDir ?? process.cwd(), model.rules);
    try {
      // The stores, the agent and the drivers are loaded by the commands that use them only.
      const { loadScriptedRulesFile } = await import("@switchboard/agent");
      await loadScriptedRulesFile(model.rules, baseDir);
    } catch (error) {
      issues.push({
        severity: "error",
        code: "invalid-rules-file",
        message: `agents.list[${index}] (${agent.id}): ${errorMessage(error)}; \`switchboard up\` and \`switchboard agent\` refuse to start`,
        path: file,
        fix: `create or fix ${file}, or point agents.list[${index}].model.rules at an existing rules file`,
      });
    }
  }
  return issues;
}

async function loadConfigIssues(
  configPath: string | undefined,
  env: NodeJS.ProcessEnv,
): Promise<{ loaded?: LoadedConfig; issues: Issue[] }> {
  try {
    const loaded = await loadConfig(configPath, { env });
    return { loaded, issues: await rulesFileIssues(loaded.config, loaded.baseDir) };
  } catch (error) {
    const file = configPath ?? env.SWITCHBOARD_CONFIG;
    return {
      issues: [
        {
          severity: "error",
          code: "invalid-config",
          message: `${errorMessage(error)}; every command that loads it refuses to start`,
          ...(file ? { path: resolve(file) } : {}),
          fix: file ? `fix ${resolve(file)} as the message says` : "fix the config as the message says",
        },
      ],
    };
  }
}

/** With `store.kind: "postgres"`: the connection and the schema (the data dir still holds the secrets). */
async function postgresIssues(
  config: Config | undefined,
  env: NodeJS.ProcessEnv,
): Promise<{ check?: PostgresCheck; issues: Issue[] }> {
  const store = config?.store;
  if (store?.kind !== "postgres") return { issues: [] };
  const [{ postgresUrl }, { checkPostgresStore }] = await Promise.all([
    import("../store-open"),
    import("@switchboard/store-pg"),
  ]);
  let url: string;
  try {
    url = postgresUrl(store, env);
  } catch (error) {
    return {
      issues: [
        {
          severity: "error",
          code: "invalid-config",
          message: errorMessage(error),
          fix: `set ${store.urlEnv} to the postgres:// URL, or give store.url`,
        },
      ],
    };
  }
  const check = await checkPostgresStore({ url, schema: store.schema });
  return { check, issues: check.issues };
}

const SYMBOLS: Record<DoctorIssue["severity"], string> = { error: "✗", warning: "!", info: "·" };

export const doctorCommand: Command = {
  spec,
  async run({ io, args, env }) {
    const configPath = stringOption(args.values, "config");
    const config = await loadConfigIssues(configPath, env);
    // A broken config still gets its data dir checked: the flag, $SWITCHBOARD_HOME or the default.
    const dataDir = resolveDataDir(
      config.loaded?.config ?? defaultConfig(),
      stringOption(args.values, "data-dir"),
      env,
    );
    let actions: string[] = [];
    let report: DoctorReport | undefined;
    const { checkDataDir, repairDataDir } = await import("@switchboard/store-fs");
    // On a postgres store the data dir holds only the secrets: the store is checked in the database.
    const onPostgres = config.loaded?.config.store.kind === "postgres";
    if (onPostgres) {
      if (args.values.repair)
        actions = ["nothing to repair on a postgres store (the database keeps its own consistency)"];
    } else if (args.values.repair) {
      try {
        const result = await withProgress(io, `repairing ${dataDir}`, () => repairDataDir(dataDir));
        actions = result.actions;
        report = result.report;
      } catch (error) {
        io.err(`cannot repair ${dataDir}: ${errorMessage(error)}`);
        return EXIT.failure;
      }
    } else {
      report = await withProgress(io, `checking ${dataDir}`, () => checkDataDir(dataDir));
    }
    const postgres = await postgresIssues(config.loaded?.config, env);
    const issues: Issue[] = [
      ...config.issues,
      ...postgres.issues,
      ...(report?.issues ?? []),
      ...(await secretFileIssues(dataDir)),
    ];
    const ok = !issues.some((issue) => issue.severity === "error");
    if (args.values.json) {
      printJson(io, {
        config: config.loaded?.path ?? configPath ?? null,
        ...(report ?? { dataDir }),
        ...(postgres.check ? { postgres: postgres.check } : {}),
        ok,
        ...(args.values.repair ? { repaired: actions } : {}),
        issues,
      });
      return ok ? EXIT.ok : EXIT.failure;
    }
    const configState = config.loaded
      ? `${config.loaded.path ?? "(built-in defaults)"} — ${config.issues.length === 0 ? "valid" : "has errors"}`
      : `${configPath ?? env.SWITCHBOARD_CONFIG ?? "(built-in defaults)"} — invalid`;
    io.out(`config:    ${configState}`);
    io.out(`data dir:  ${dataDir}`);
    if (postgres.check) {
      const { target, schema, version, supported, estimatedRows: rows } = postgres.check;
      const state =
        version === undefined ? "not created yet" : `version ${version} (this build: ${supported})`;
      io.out(`store:     PostgreSQL ${target}, schema ${schema} — ${state}`);
      if (rows)
        io.out(
          `rows:      about ${rows.sessions} sessions, ${rows.transcriptEntries} transcript entries, ${rows.runs} runs, ${rows.auditRecords} audit records`,
        );
    }
    if (report?.formatVersion !== undefined) io.out(`format:    version ${report.formatVersion}`);
    if (report) {
      const counts = report.counts;
      io.out(
        `contents:  ${counts.sessions} sessions, ${counts.runs} runs, ${counts.transcripts} transcripts (${counts.archivedTranscripts} archived), ${counts.pendingCommitEntries} pending commit entries`,
      );
    }
    for (const action of actions) io.out(`repaired:  ${action}`);
    if (args.values.repair && actions.length === 0) io.out("repaired:  nothing needed repair");
    if (issues.length === 0) io.out("no problems found");
    for (const issue of issues) {
      io.out(`${SYMBOLS[issue.severity]} ${issue.severity.padEnd(7)} ${issue.code}: ${issue.message}`);
      if (issue.path && issue.severity !== "info") io.out(`          file: ${issue.path}`);
      if (issue.fix) io.out(`          fix:  ${issue.fix}`);
    }
    io.out(ok ? "ok" : "there are errors (see above)");
    return ok ? EXIT.ok : EXIT.failure;
  },
};
