import { trace } from "@opentelemetry/api";
import {
  type Config,
  createPolicyEngine,
  type DiscoveryFilter,
  type Level,
  type PolicyContext,
  type PolicyDecision,
  type PolicyEngine,
  type SessionEntry,
  type SessionFacts,
  validatePolicyRules,
} from "@switchboard/core";
import type { AuditService } from "./audit-service";
import type { EventLog } from "./ports/event-log";
import type { SessionsService } from "./sessions-service";

/** The gateway's one door to core's policy engine: builds facts, evaluates, records blocks and redactions. */
export class PolicyService {
  readonly engine: PolicyEngine;

  constructor(
    config: Config,
    private readonly sessions: SessionsService,
    private readonly audit: AuditService,
    private readonly bus: EventLog,
  ) {
    const agents = config.agents.list;
    this.engine = createPolicyEngine({
      rules: validatePolicyRules(config.policy.rules),
      default: config.policy.default,
      ...(config.session.sendPolicy ? { sendPolicy: config.session.sendPolicy } : {}),
      agentToAgent: config.tools.agentToAgent,
      configuredAgents: agents.map((agent) => agent.id),
      spawn: (agentId: string) => {
        const agent = agents.find((candidate) => candidate.id === agentId);
        return {
          ...(agent?.subagents?.allowAgents ? { allowAgents: agent.subagents.allowAgents } : {}),
          ...(agent?.subagents?.maxSpawnDepth !== undefined
            ? { maxSpawnDepth: agent.subagents.maxSpawnDepth }
            : {}),
          ...(agent?.subagents?.maxChildren !== undefined
            ? { maxChildren: agent.subagents.maxChildren }
            : {}),
        };
      },
      maxSpawnDepth: config.agents.defaults.subagents.maxSpawnDepth,
      maxChildren: config.agents.defaults.subagents.maxChildren,
      maxHops: config.session.agentToAgent.maxHops,
      budgetPerMinute: config.session.agentToAgent.budgetPerMinute,
      sandboxVisibility: config.agents.defaults.sandbox.sessionToolsVisibility,
      hookBudgetMs: config.policy.hookBudgetMs,
    });
  }

  /** `sessions_list` visibility for one caller (core's compiled discovery, equal to `evaluate`). */
  discovery(caller: SessionEntry): DiscoveryFilter {
    return this.engine.discovery(this.facts(caller));
  }

  facts(entry: SessionEntry): SessionFacts {
    const agent = this.sessions.agentConfig(entry.agentId);
    const route = this.sessions.route(entry);
    return {
      key: entry.key,
      agentId: entry.agentId,
      kind: this.sessions.kind(entry),
      channel: this.sessions.channel(entry),
      ...(entry.chatType ? { chatType: entry.chatType } : {}),
      taint: entry.taint,
      clearance: entry.clearance,
      ...(agent?.sandboxed ? { sandboxed: true } : {}),
      ...(entry.spawnedBy ? { spawnedBy: entry.spawnedBy } : {}),
      spawnDepth: entry.spawnDepth ?? 0,
      ...(entry.sendPolicy ? { sendPolicy: entry.sendPolicy } : {}),
      ...(route?.to ? { to: route.to } : {}),
    };
  }

  /** Pure evaluation: no audit, no events (simulation and list filtering use this). */
  evaluate(context: PolicyContext, explain = false): PolicyDecision {
    return this.engine.evaluate(context, { explain });
  }

  /** Evaluation of a real step: a block or redaction is audited and announced. */
  async enforce(context: PolicyContext, actor?: string): Promise<PolicyDecision> {
    return this.record(context, this.engine.evaluate(context, { explain: false }), actor);
  }

  /**
   * Audits and announces `decision`, made by `evaluate` on `context`, as the decision of a real step
   * (for a step that must know what a decision rewrites before it settles what it hands over).
   */
  async record(context: PolicyContext, decision: PolicyDecision, actor?: string): Promise<PolicyDecision> {
    // Traces on: the decision is an event on the span of the step it gated (no span: nothing to do).
    trace.getActiveSpan()?.addEvent("policy.decision", {
      "switchboard.policy.hook": context.hook,
      "switchboard.policy.action": decision.action,
      ...(decision.ruleId ? { "switchboard.policy.rule_id": decision.ruleId } : {}),
      ...(context.tool ? { "switchboard.tool": context.tool.name } : {}),
    });
    if (decision.action === "BLOCK") {
      const sessionKey = context.caller?.key;
      const target =
        context.target?.key ??
        (context.recipient ? `${context.recipient.channel}:${context.recipient.to ?? ""}` : undefined);
      await this.audit.append({
        kind: "policy.blocked",
        ...(actor ? { actor } : {}),
        ...(sessionKey ? { sessionKey } : {}),
        data: {
          hook: context.hook,
          ruleId: decision.ruleId,
          message: decision.message,
          ...(target ? { target } : {}),
          ...(context.tool ? { tool: context.tool.name } : {}),
        },
      });
      this.bus.publish(
        "policy.blocked",
        {
          hook: context.hook,
          ruleId: decision.ruleId,
          message: decision.message,
          ...(sessionKey ? { sessionKey } : {}),
          ...(target ? { target } : {}),
        },
        sessionKey ? { sessionKey } : {},
      );
    } else if (decision.action === "REDACT") {
      await this.audit.append({
        kind: "policy.redacted",
        ...(actor ? { actor } : {}),
        ...(context.caller?.key ? { sessionKey: context.caller.key } : {}),
        data: { hook: context.hook, ruleId: decision.ruleId, redactions: decision.redactions ?? 0 },
      });
    }
    return decision;
  }

  channelLevel(channel: string, to?: string): Level {
    return this.sessions.channelLevelFor(channel, to);
  }
}
