import { readFile } from "node:fs/promises";
import { isAbsolute, resolve } from "node:path";
import { parseScriptedRulesFile, type ScriptedRule, SwitchboardError } from "@switchboard/core";
import { parse as parseYaml } from "yaml";
import { templateProblems, templateStrings } from "./template";

/**
 * Validates scripted rules — a list, or `{rules: [...]}` as in a rules file — with the config's rule
 * schema, then checks every template: an unknown variable would otherwise render as empty text at
 * run time, so it is refused at load time. `where` names the source in errors.
 */
export function parseScriptedRules(value: unknown, where: string): ScriptedRule[] {
  const rules = parseScriptedRulesFile(Array.isArray(value) ? { rules: value } : value, where);
  const problems = rules.flatMap((rule, index) => ruleTemplateProblems(rule, `rules[${index}]`));
  if (problems.length > 0) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `invalid ${where}:\n  ${problems.map((p) => `${p.path}: ${p.message}`).join("\n  ")}`,
      {
        details: { issues: problems },
      },
    );
  }
  return rules;
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
      {
        cause: error,
      },
    );
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${fullPath}: not valid YAML or JSON: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  return parseScriptedRules(value, `scripted rules file ${fullPath}`);
}

function ruleTemplateProblems(rule: ScriptedRule, path: string): { path: string; message: string }[] {
  const out: { path: string; message: string }[] = [];
  const check = (value: unknown, where: string) => {
    for (const template of templateStrings(value)) {
      for (const message of templateProblems(template)) out.push({ path: where, message });
    }
  };
  check(rule.reply, `${path}.reply`);
  check(rule.fail, `${path}.fail`);
  if (Array.isArray(rule.call)) {
    for (const [index, call] of rule.call.entries()) check(call.args, `${path}.call[${index}].args`);
  } else if (rule.call) {
    check(rule.call.args, `${path}.call.args`);
  }
  return out;
}
