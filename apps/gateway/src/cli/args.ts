import { parseArgs } from "node:util";
import { UsageError } from "./cli-errors";

export interface OptionSpec {
  type: "string" | "boolean";
  short?: string;
  /** Placeholder shown in help, e.g. `N` for `--wait N`. */
  value?: string;
  description: string;
}

export type OptionSpecs = Record<string, OptionSpec>;

/** What a command accepts, and the text its `--help` prints. */
export interface CommandSpec {
  /** As typed after `switchboard`, e.g. `sessions list`. */
  name: string;
  summary: string;
  /** One line for the command overview (default: the summary's first sentence). */
  brief?: string;
  /** Positional arguments as shown in usage, e.g. `<key> <message>`. */
  args?: string;
  /** How many positionals are required / allowed. */
  positionals?: { min: number; max: number };
  options: OptionSpecs;
  /** Extra help paragraphs and examples. */
  details?: string;
}

export type OptionValues = Record<string, string | boolean | undefined>;

export interface ParsedArgs {
  values: OptionValues;
  positionals: string[];
  help: boolean;
}

export const HELP_OPTION: OptionSpecs = {
  help: { type: "boolean", short: "h", description: "show this help" },
};

export const JSON_OPTION: OptionSpecs = {
  json: { type: "boolean", description: "print JSON instead of text (for scripts)" },
};

export const CONFIG_OPTIONS: OptionSpecs = {
  config: {
    type: "string",
    value: "FILE",
    description: "config file (.json5, .json, .yaml); default $SWITCHBOARD_CONFIG, else built-in defaults",
  },
  "data-dir": {
    type: "string",
    value: "DIR",
    description: "data directory; default $SWITCHBOARD_HOME, else gateway.dataDir of the config",
  },
};

export const CLIENT_OPTIONS: OptionSpecs = {
  url: {
    type: "string",
    value: "URL",
    description:
      "gateway URL; default $SWITCHBOARD_URL, else ws://<gateway.host>:<gateway.port> of the config",
  },
  token: {
    type: "string",
    value: "TOKEN",
    description: "operator token; default $SWITCHBOARD_TOKEN, else <data dir>/operator-token",
  },
  ...CONFIG_OPTIONS,
};

export function usageLine(spec: CommandSpec): string {
  const args = spec.args ? ` ${spec.args}` : "";
  return `usage: switchboard ${spec.name}${args} [options]`;
}

export function helpText(spec: CommandSpec): string {
  const options = { ...spec.options, ...HELP_OPTION };
  const rows = Object.entries(options).map(([name, option]) => {
    const flag = `${option.short ? `-${option.short}, ` : "    "}--${name}${option.type === "string" ? ` ${option.value ?? "VALUE"}` : ""}`;
    return [flag, option.description] as const;
  });
  const width = Math.max(...rows.map(([flag]) => flag.length));
  const lines = [usageLine(spec), "", spec.summary, "", "Options:"];
  for (const [flag, description] of rows) lines.push(`  ${flag.padEnd(width)}  ${description}`);
  if (spec.details) lines.push("", spec.details.trimEnd());
  return `${lines.join("\n")}\n`;
}

/** Parses a command's argv (after the command words); bad flags and arity are UsageErrors. */
export function parseCommandArgs(spec: CommandSpec, argv: readonly string[]): ParsedArgs {
  const options = { ...spec.options, ...HELP_OPTION };
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: Object.fromEntries(
        Object.entries(options).map(([name, option]) => [
          name,
          { type: option.type, ...(option.short ? { short: option.short } : {}) },
        ]),
      ),
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new UsageError(describeParseError(error), usageLine(spec), spec.name);
  }
  const values = parsed.values as OptionValues;
  // No option means anything when empty, and readers took "" for a real value: `--data-dir ""` made
  // the working directory the data dir, `--host ""` a gateway at `ws://:PORT`.
  for (const [name, value] of Object.entries(values)) {
    if (value === "")
      throw new UsageError(`option --${name} needs a value (got "")`, usageLine(spec), spec.name);
  }
  const help = values.help === true;
  const positionals = parsed.positionals;
  if (!help && spec.positionals) {
    const { min, max } = spec.positionals;
    if (positionals.length < min) {
      const names = (spec.args ?? "").match(/<[^>]+>/g) ?? [];
      const missing = names[positionals.length] ?? "an argument";
      throw new UsageError(`missing ${missing}`, usageLine(spec), spec.name);
    }
    if (positionals.length > max) {
      throw new UsageError(
        `unexpected argument "${positionals[max]}" (quote text that contains spaces)`,
        usageLine(spec),
        spec.name,
      );
    }
  }
  return { values, positionals, help };
}

function describeParseError(error: unknown): string {
  const message = (error as Error).message;
  const code = (error as { code?: string }).code;
  const option = /'(-{1,2}[^'\s]+)/.exec(message)?.[1];
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && option) return `unknown option ${option}`;
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && option) {
    if (message.includes("argument missing")) return `option ${option} needs a value`;
    if (message.includes("does not take an argument")) return `option ${option} takes no value`;
  }
  return message;
}

export function stringOption(values: OptionValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;

/** A numeric flag within bounds, or a UsageError naming the flag and the rule. */
export function numberOption(
  spec: CommandSpec,
  values: OptionValues,
  name: string,
  rule: { min: number; max: number; integer?: boolean; unit?: string },
): number | undefined {
  const raw = stringOption(values, name);
  if (raw === undefined) return undefined;
  // Number() also reads `0x10`, `1e3` and `0b1`: a flag takes the decimal spelling only.
  const value = DECIMAL.test(raw.trim()) ? Number(raw) : Number.NaN;
  const kind = `${rule.integer ? "a whole number" : "a number"}${rule.unit ? ` of ${rule.unit}` : ""}`;
  if (
    raw.trim() === "" ||
    !Number.isFinite(value) ||
    value < rule.min ||
    value > rule.max ||
    (rule.integer && !Number.isInteger(value))
  ) {
    throw new UsageError(
      `--${name}: must be ${kind} from ${rule.min} to ${rule.max} (got "${raw}")`,
      usageLine(spec),
      spec.name,
    );
  }
  return value;
}

/**
 * A comma-separated list flag (`--kinds main,group`). With `allowed`, an entry outside it is a
 * UsageError naming it: the protocol ignores unknown kinds (tools.md), so `--kinds bogus` would
 * otherwise list everything, the opposite of what its user asked for.
 */
export function listOption(
  spec: CommandSpec,
  values: OptionValues,
  name: string,
  allowed?: readonly string[],
): string[] | undefined {
  const raw = stringOption(values, name);
  if (raw === undefined) return undefined;
  const items = raw
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
  const unknown = allowed ? items.filter((item) => !allowed.includes(item)) : [];
  if (items.length === 0 || unknown.length > 0) {
    const rule = allowed ? `a comma-separated list of ${allowed.join(", ")}` : "a comma-separated list";
    throw new UsageError(
      `--${name}: must be ${rule} (${unknown.length > 0 ? `unknown: ${unknown.join(", ")}` : `got "${raw}"`})`,
      usageLine(spec),
      spec.name,
    );
  }
  return items;
}
