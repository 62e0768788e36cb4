import { readFile } from "node:fs/promises";
import { isAbsolute, resolve } from "node:path";
import { formatPath, SwitchboardError } from "@switchboard/core";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { type ScriptedRule, ScriptedRulesSchema } from "./scripted-rule-schema";

/**
 * Validates rules given inline (an array) or read from a file; `where` prefixes every error so it
 * names the config path or the file.
 */
export function parseScriptedRules(value: unknown, where: string): ScriptedRule[] {
  // A rules file may hold the list itself or `{rules: [...]}` (the form shown in the docs).
  let list = value;
  let label = where;
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const keys = Object.keys(value);
    const unknown = keys.filter((key) => key !== "rules");
    if (unknown.length > 0 || !("rules" in value)) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `${where}: expected a list of rules or an object with only a "rules" list` +
          (unknown.length > 0 ? ` (unknown keys: ${unknown.join(", ")})` : ""),
      );
    }
    list = (value as { rules: unknown }).rules;
    label = `${where}.rules`;
  } else if (!Array.isArray(value)) {
    const got = value === null ? "null" : typeof value;
    throw new SwitchboardError("INVALID_REQUEST", `${where}: expected a list of rules (or {rules: [...]}), got ${got}`);
  }
  const parsed = ScriptedRulesSchema.safeParse(list);
  if (!parsed.success) throw rulesError(parsed.error, label);
  return parsed.data;
}

/** Reads a JSON or YAML rules file (YAML parsing accepts JSON too). Relative paths use `baseDir`. */
export async function loadScriptedRulesFile(path: string, baseDir = process.cwd()): Promise<ScriptedRule[]> {
  const fullPath = isAbsolute(path) ? path : resolve(baseDir, path);
  let text: string;
  try {
    text = await readFile(fullPath, "utf8");
  } catch (error) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `cannot read scripted rules file ${fullPath}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new SwitchboardError("INVALID_REQUEST", `${fullPath}: not valid YAML or JSON: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return parseScriptedRules(value, fullPath);
}

function rulesError(error: z.ZodError, label: string): SwitchboardError {
  const lines = error.issues.map((issue) => {
    const path = formatPath(issue.path as PropertyKey[]);
    const where = path === "" ? label : path.startsWith("[") ? `${label}${path}` : `${label}.${path}`;
    return `${where}: ${issue.message}`;
  });
  return new SwitchboardError("INVALID_REQUEST", lines.join("; "), {
    details: { issues: error.issues.map((issue) => ({ path: formatPath(issue.path as PropertyKey[]), message: issue.message })) },
  });
}
