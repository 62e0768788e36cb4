import { randomUUID } from "node:crypto";
import { type PolicyContext, type SessionEntry, UNKNOWN_CHAT_TYPE } from "@switchboard/core";
import type { AuditService } from "./audit-service";
import type { PolicyService } from "./policy-service";
import type { EventLog } from "./ports/event-log";
import type { SessionsService } from "./sessions-service";

export type OutputResult =
  | { status: "ok"; deliveryId: string; text: string; redactions: number }
  | { status: "forbidden"; error: string }
  | { status: "no-route"; error: string };

/**
 * Text leaving the system for a channel: a reply, an announce, or the `message` tool. It passes
 * PRE_OUTPUT (flow rule against the recipient's classification, send policy, redaction); a blocked
 * output is recorded in the session's transcript and the audit log, never sent.
 */
export class OutputDelivery {
  constructor(
    private readonly sessions: SessionsService,
    private readonly policy: PolicyService,
    private readonly audit: AuditService,
    private readonly bus: EventLog,
  ) {}

  /** The PRE_OUTPUT context of `text` leaving `entry` for a route (shared with `message` simulation). */
  outputContext(entry: SessionEntry, route: { channel: string; to: string }, text: string): PolicyContext {
    // The session's own chat has the session's chat type; any other destination (the `message`
    // tool's) is one the gateway cannot classify, so send-policy chat-type rules fail closed on it.
    const own = this.sessions.route(entry);
    const elsewhere = own?.channel.toLowerCase() !== route.channel.toLowerCase() || own?.to !== route.to;
    return {
      hook: "PRE_OUTPUT",
      caller: this.policy.facts(entry),
      recipient: {
        // Lower-cased as session channels are, so a rule's channel (held to lower case) matches.
        channel: route.channel.toLowerCase(),
        to: route.to,
        level: this.policy.channelLevel(route.channel, route.to),
        ...(elsewhere ? { chatType: UNKNOWN_CHAT_TYPE } : {}),
      },
      text,
    };
  }

  async deliver(
    entry: SessionEntry,
    text: string,
    options: { channel?: string; to?: string; reason: string; actor?: string; runId?: string },
  ): Promise<OutputResult> {
    const route =
      options.channel && options.to
        ? { channel: options.channel.toLowerCase(), to: options.to }
        : this.sessions.route(entry);
    if (!route) {
      await this.recordEvent(
        entry,
        "delivery.skipped",
        { reason: options.reason, why: "no known route" },
        options.runId,
      );
      return { status: "no-route", error: `no delivery route for ${entry.key}` };
    }
    const decision = await this.policy.enforce(this.outputContext(entry, route, text), options.actor);
    if (decision.action === "BLOCK") {
      await this.recordEvent(
        entry,
        "delivery.blocked",
        {
          reason: options.reason,
          channel: route.channel,
          to: route.to,
          ruleId: decision.ruleId,
          message: decision.message,
        },
        options.runId,
      );
      return { status: "forbidden", error: decision.message };
    }
    const finalText = decision.text ?? text;
    const deliveryId = randomUUID();
    // The post goes out before its records are written: a crash between the two leaves a post
    // with no `delivery.sent`, which a caller resuming it (a reply's pending mark, an announce)
    // makes again — at least once. The other order could record a post that never went out.
    this.bus.publish(
      "delivery",
      { sessionKey: entry.key, channel: route.channel, to: route.to, text: finalText, deliveryId },
      { sessionKey: entry.key, agentId: entry.agentId },
    );
    await this.audit.append({
      kind: "delivery",
      sessionKey: entry.key,
      ...(options.actor ? { actor: options.actor } : {}),
      data: {
        deliveryId,
        channel: route.channel,
        to: route.to,
        reason: options.reason,
        redactions: decision.redactions ?? 0,
      },
    });
    await this.recordEvent(
      entry,
      "delivery.sent",
      {
        reason: options.reason,
        channel: route.channel,
        to: route.to,
        deliveryId,
        redactions: decision.redactions ?? 0,
      },
      options.runId,
    );
    return { status: "ok", deliveryId, text: finalText, redactions: decision.redactions ?? 0 };
  }

  private async recordEvent(
    entry: SessionEntry,
    name: string,
    data: Record<string, unknown>,
    runId?: string,
  ): Promise<void> {
    await this.sessions.append(entry.key, [
      { type: "event", label: entry.taint, ...(runId ? { runId } : {}), event: { name, data } },
    ]);
  }
}
