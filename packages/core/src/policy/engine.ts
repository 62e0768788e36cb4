import { type Level, LOWEST_LEVEL, maxLevel } from "../labels/level";
import type { AgentToAgentConfig } from "./agent-to-agent";
import { type BuiltinRule, builtinRules } from "./builtins";
import { type CompiledCondition, compileCondition, readPath } from "./conditions";
import type { PolicyContext, SessionFacts } from "./context";
import { compileDiscovery, type DiscoveryFilter } from "./discovery";
import { incomingLevel, outgoingLevel } from "./flow";
import { HOOKS, type Hook } from "./hooks";
import { compileRedactions, redactText } from "./redact";
import {
  BUDGET_RULE_ID,
  DEFAULT_REDACTION,
  type PolicyRule,
  type PolicyRuleInput,
  validatePolicyRules,
} from "./rule-schema";
import type { SafeRegex } from "./safe-regex";
import type { SendPolicyConfig } from "./send-policy";
import type { SpawnLimitsSource } from "./spawn";

export const DEFAULT_HOOK_BUDGET_MS = 250;

export type PolicyAction = "ALLOW" | "BLOCK" | "REDACT";
export type RuleAction = "allow" | "deny" | "redact";

/** One line of a decision's explanation. Built-in rules report action `deny` (all they can do). */
export interface RuleEvaluation {
  ruleId: string;
  /** The hook it ran on (several hooks meet in `evaluateHooks`). */
  hook: Hook;
  /** Conditions held (built-ins: the violation was found). */
  matched: boolean;
  action: RuleAction;
  /** Replacements a matching redact rule made. */
  redactions?: number;
  /** Set when the rule threw; the rule then decided `deny`. */
  error?: string;
}

export interface DecisionLabels {
  /** The caller's taint before (PUBLIC without a caller). */
  before: Level;
  /** The caller's taint if the action goes ahead (raised by reads; unchanged when blocked). */
  after: Level;
  /** PRE_SEND / PRE_SPAWN: the target's taint after delivery. */
  targetAfter?: Level;
}

export interface PolicyDecision {
  action: PolicyAction;
  /** The deciding rule; null when no rule matched and `default` decided. */
  ruleId: string | null;
  message: string;
  labels: DecisionLabels;
  /** Every rule that ran, in order (only with `explain: true`). */
  evaluated?: RuleEvaluation[];
  /** The text to deliver, rewritten by redact rules (only when the context had `text` and not blocked). */
  text?: string;
  /** The texts to hand over, each rewritten (only when the context had `texts` and not blocked). */
  texts?: string[];
  /** Total replacements (only when the context had `text` or `texts`). */
  redactions?: number;
}

export interface PolicyEngineOptions {
  rules?: readonly (PolicyRule | PolicyRuleInput)[];
  /** `policy.default`: what happens when no rule matches (default allow). */
  default?: "allow" | "deny";
  sendPolicy?: SendPolicyConfig;
  agentToAgent?: AgentToAgentConfig;
  /** Per requester agent spawn limits: a map by agent id or a lookup function. */
  spawn?: SpawnLimitsSource;
  /** Ids of the configured agents (`agents.list`): a spawn of any other is refused. Unset: not checked. */
  configuredAgents?: readonly string[];
  /** Defaults for agents whose limits leave them unset (1 and 5). */
  maxSpawnDepth?: number;
  maxChildren?: number;
  /** `session.agentToAgent.maxHops` (default 4). */
  maxHops?: number;
  /** `session.agentToAgent.budgetPerMinute` (default 30). */
  budgetPerMinute?: number;
  sandboxVisibility?: "spawned" | "all";
  /**
   * Time budget of one hook's user rules in ms (default 250), measured with `now` between rules
   * (the built-ins are not timed). A rule cannot be interrupted mid-way; the check after it denies.
   */
  hookBudgetMs?: number;
  /** Clock for the budget; the engine reads no other time source. */
  now?: () => number;
}

export interface EvaluateOptions {
  /** Fill `evaluated` with every rule that ran. */
  explain?: boolean;
}

export interface PolicyEngine {
  evaluate(ctx: PolicyContext, options?: EvaluateOptions): PolicyDecision;
  /** `sessions_list` visibility for `caller`, compiled once for a whole list (see discovery.ts). */
  discovery(caller: SessionFacts): DiscoveryFilter;
  /** The validated user rules, in evaluation order per hook. */
  readonly rules: readonly PolicyRule[];
  /** Whether a user rule may rewrite text on `hook` (callers skip gathering texts otherwise). */
  redactsOn(hook: Hook): boolean;
}

interface CompiledRule {
  rule: PolicyRule;
  conditions: CompiledCondition[];
  patterns: SafeRegex[];
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function compileRule(rule: PolicyRule): CompiledRule {
  return {
    rule,
    conditions: Object.entries(rule.when ?? {}).map(([field, condition]) =>
      compileCondition(field, condition),
    ),
    patterns: rule.redact ? compileRedactions(rule.redact.patterns) : [],
  };
}

/**
 * Builds the rule engine. Evaluation per hook: the addressing built-ins (`a2a`, `visibility`), the
 * flow rules (hard), the other built-ins (`send-policy`, `a2a.hop-limit`, `a2a.cycle`, `a2a.budget`,
 * `spawn`), then user rules by descending priority (stable). Built-ins only deny, so their order
 * decides which refusal is reported, never whether a call passes (see builtins.ts). The first matching allow/deny decides; matching redact rules all
 * apply and evaluation goes on; no match → `default`. A throwing rule or an exhausted budget denies.
 * Given the same context and clock readings, the decision is always the same.
 */
export function createPolicyEngine(options: PolicyEngineOptions = {}): PolicyEngine {
  const rules = validatePolicyRules(options.rules ?? []);
  const byHook = new Map<Hook, CompiledRule[]>();
  for (const hook of HOOKS) {
    const forHook = rules.filter((rule) => rule.hook === hook).map(compileRule);
    // Array.prototype.sort is stable: equal priorities keep config order.
    forHook.sort((a, b) => b.rule.priority - a.rule.priority);
    byHook.set(hook, forHook);
  }
  const builtins = builtinRules(options);
  const builtinsByHook = new Map<Hook, BuiltinRule[]>(
    HOOKS.map((hook) => [hook, builtins.filter((rule) => rule.hooks.includes(hook))]),
  );
  const fallback = options.default ?? "allow";
  const budget = options.hookBudgetMs ?? DEFAULT_HOOK_BUDGET_MS;
  const now = options.now ?? (() => performance.now());
  const ordered = HOOKS.flatMap((hook) => (byHook.get(hook) ?? []).map((compiled) => compiled.rule));

  function evaluate(ctx: PolicyContext, evaluateOptions: EvaluateOptions = {}): PolicyDecision {
    const explain = evaluateOptions.explain === true;
    const evaluated: RuleEvaluation[] | undefined = explain ? [] : undefined;
    // Set when the user rules start: the budget is theirs (see `overBudget`).
    let start = 0;
    const hasText = typeof ctx.text === "string";
    let text = ctx.text;
    let texts = ctx.texts === undefined ? undefined : [...ctx.texts];
    let redactions = 0;
    let firstRedactor: string | undefined;
    const redactors: string[] = [];

    const labels = (blocked: boolean): DecisionLabels => {
      const before = ctx.caller?.taint ?? LOWEST_LEVEL;
      if (blocked) {
        const result: DecisionLabels = { before, after: before };
        if (ctx.target && (ctx.hook === "PRE_SEND" || ctx.hook === "PRE_SPAWN"))
          result.targetAfter = ctx.target.taint;
        return result;
      }
      const incoming = ctx.caller ? incomingLevel(ctx) : undefined;
      const after = incoming === undefined || ctx.facts?.discovery ? before : maxLevel(before, incoming);
      const result: DecisionLabels = { before, after };
      if (ctx.target && (ctx.hook === "PRE_SEND" || ctx.hook === "PRE_SPAWN")) {
        result.targetAfter = maxLevel(ctx.target.taint, outgoingLevel(ctx));
      }
      return result;
    };

    const finish = (action: PolicyAction, ruleId: string | null, message: string): PolicyDecision => {
      const blocked = action === "BLOCK";
      let decisionLabels: DecisionLabels;
      try {
        decisionLabels = labels(blocked);
      } catch {
        // Only reachable with corrupted levels, which the flow rules already turned into a BLOCK.
        const before = ctx.caller?.taint ?? LOWEST_LEVEL;
        decisionLabels = { before, after: before };
      }
      const decision: PolicyDecision = { action, ruleId, message, labels: decisionLabels };
      if (evaluated) decision.evaluated = evaluated;
      if (hasText) {
        if (!blocked) decision.text = text;
        decision.redactions = redactions;
      }
      if (texts !== undefined) {
        if (!blocked) decision.texts = texts;
        decision.redactions = redactions;
      }
      return decision;
    };

    const block = (ruleId: string, message: string) => finish("BLOCK", ruleId, message);
    const overBudget = (lastRuleId: string): PolicyDecision | undefined => {
      const elapsed = now() - start;
      if (!(elapsed > budget)) return undefined;
      return block(
        BUDGET_RULE_ID,
        `policy hook ${ctx.hook} exceeded its time budget of ${budget} ms (at rule ${lastRuleId}); denied`,
      );
    };

    for (const builtin of builtinsByHook.get(ctx.hook) ?? []) {
      let violation: string | undefined;
      try {
        violation = builtin.check(ctx);
      } catch (error) {
        evaluated?.push({
          ruleId: builtin.id,
          hook: ctx.hook,
          matched: true,
          action: "deny",
          error: errorText(error),
        });
        return block(builtin.id, `policy rule ${builtin.id} failed (${errorText(error)}); denied`);
      }
      evaluated?.push({
        ruleId: builtin.id,
        hook: ctx.hook,
        matched: violation !== undefined,
        action: "deny",
      });
      if (violation !== undefined) return block(builtin.id, violation);
    }

    // Only the user rules are timed: the built-ins are a few comparisons of facts, and timing them
    // on the wall clock denied sends whenever the process was descheduled or paused for a GC in
    // between (a loaded machine), which says nothing about the rules. A regex or redact rule over a
    // long text is what the budget bounds.
    const userRules = byHook.get(ctx.hook) ?? [];
    if (userRules.length > 0) start = now();
    for (const { rule, conditions, patterns } of userRules) {
      let matched: boolean;
      let count = 0;
      try {
        matched = conditions.every((condition) => condition.test(readPath(ctx, condition.path)));
        const replacement = rule.redact?.replacement ?? DEFAULT_REDACTION;
        if (matched && rule.action === "redact" && text !== undefined) {
          const result = redactText(text, patterns, replacement);
          text = result.text;
          count = result.count;
        }
        if (matched && rule.action === "redact" && texts !== undefined) {
          texts = texts.map((one) => {
            const result = redactText(one, patterns, replacement);
            count += result.count;
            return result.text;
          });
        }
      } catch (error) {
        evaluated?.push({
          ruleId: rule.id,
          hook: ctx.hook,
          matched: true,
          action: rule.action,
          error: errorText(error),
        });
        return block(rule.id, `policy rule ${rule.id} failed (${errorText(error)}); denied`);
      }
      const entry: RuleEvaluation = { ruleId: rule.id, hook: ctx.hook, matched, action: rule.action };
      if (matched && rule.action === "redact") entry.redactions = count;
      evaluated?.push(entry);
      const late = overBudget(rule.id);
      if (late) return late;
      if (!matched) continue;
      if (rule.action === "deny") return block(rule.id, rule.message ?? `denied by policy rule ${rule.id}`);
      if (rule.action === "redact") {
        if (count > 0) {
          redactions += count;
          firstRedactor ??= rule.id;
          redactors.push(rule.id);
        }
        continue;
      }
      if (redactions > 0) return finish("REDACT", firstRedactor ?? rule.id, redactedMessage());
      return finish("ALLOW", rule.id, rule.message ?? `allowed by policy rule ${rule.id}`);
    }

    if (fallback === "deny") return finish("BLOCK", null, "no policy rule matched; policy.default is deny");
    if (redactions > 0) return finish("REDACT", firstRedactor ?? null, redactedMessage());
    return finish("ALLOW", null, "no policy rule matched; policy.default is allow");

    function redactedMessage(): string {
      return `redacted ${redactions} match${redactions === 1 ? "" : "es"} (rules: ${redactors.join(", ")})`;
    }
  }

  const historyRules = byHook.get("PRE_HISTORY")?.length ?? 0;
  const discovery = (caller: SessionFacts): DiscoveryFilter =>
    compileDiscovery(
      {
        agentToAgent: options.agentToAgent,
        sandboxVisibility: options.sandboxVisibility,
        defaultAction: fallback,
        historyRules,
      },
      caller,
    );

  const redacting = new Set(ordered.filter((rule) => rule.action === "redact").map((rule) => rule.hook));
  return { evaluate, discovery, rules: ordered, redactsOn: (hook) => redacting.has(hook) };
}

export interface HookDecision extends PolicyDecision {
  /** Each hook's own decision, in order, up to the first BLOCK. */
  decisions: PolicyDecision[];
}

/**
 * Runs several hooks of one action in order (e.g. PRE_TOOL_CALL then PRE_SEND for a simulated
 * `sessions_send`), stopping at the first BLOCK. The combined decision is that BLOCK, else the last
 * REDACT, else the last decision; `evaluated` is every step's list concatenated (each entry names
 * its hook); `labels.after` is the highest taint any step would leave.
 */
export function evaluateHooks(
  engine: PolicyEngine,
  contexts: readonly PolicyContext[],
  options: EvaluateOptions = {},
): HookDecision {
  if (contexts.length === 0) throw new Error("evaluateHooks needs at least one context");
  const decisions: PolicyDecision[] = [];
  for (const ctx of contexts) {
    const decision = engine.evaluate(ctx, options);
    decisions.push(decision);
    if (decision.action === "BLOCK") break;
  }
  const deciding =
    decisions.find((decision) => decision.action === "BLOCK") ??
    [...decisions].reverse().find((decision) => decision.action === "REDACT") ??
    (decisions[decisions.length - 1] as PolicyDecision);
  const first = decisions[0] as PolicyDecision;
  const combined: HookDecision = {
    ...deciding,
    labels: {
      ...deciding.labels,
      before: first.labels.before,
      after:
        deciding.action === "BLOCK" ? first.labels.before : maxLevel(...decisions.map((d) => d.labels.after)),
    },
    decisions,
  };
  if (options.explain) combined.evaluated = decisions.flatMap((decision) => decision.evaluated ?? []);
  return combined;
}
