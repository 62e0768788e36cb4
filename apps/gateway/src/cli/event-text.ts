import type { EventName, EventPayload } from "@switchboard/core";
import { oneLine, truncate } from "./output";

export interface EventLike {
  event: string;
  seq: number;
  payload: unknown;
}

/**
 * A session key in few characters: `agent:main:main` → `main`, `agent:research:discord:group:lab`
 * → `research@discord:group:lab`, a sub-agent → `research/sub-1a2b`.
 */
export function shortKey(key: string | undefined, mainKey = "main"): string {
  if (!key) return "gateway";
  const parts = key.split(":");
  if (parts[0] !== "agent" || parts.length < 3) return key;
  const agent = parts[1]!;
  const rest = parts.slice(2);
  if (rest.length === 1 && rest[0] === mainKey) return agent;
  if (rest[0] === "subagent") return `${agent}/sub-${(rest[1] ?? "").slice(0, 4)}`;
  return `${agent}@${rest.join(":")}`;
}

export function quote(text: string | undefined, max = 100): string {
  return JSON.stringify(truncate(oneLine(text ?? ""), max));
}

function payloadOf<E extends EventName>(event: EventLike, _name: E): EventPayload<E> {
  return event.payload as EventPayload<E>;
}

/**
 * Who did it and what happened, in words; `undefined` for events not worth a line (text deltas and
 * session updates unless `verbose`). Tool calls made through `tools.invoke` show up as the audit
 * entries they cause (deliveries, spawns, impersonations) and in the session's transcript.
 */
export function describeEvent(
  event: EventLike,
  options: { verbose?: boolean } = {},
): { actor: string; text: string } | undefined {
  switch (event.event) {
    case "run.started": {
      const p = payloadOf(event, "run.started");
      return {
        actor: shortKey(p.sessionKey),
        text: `run started (lane ${p.lane}, run ${p.runId.slice(0, 8)})`,
      };
    }
    case "run.progress": {
      const p = payloadOf(event, "run.progress");
      if (p.kind === "tool-call")
        return { actor: shortKey(p.sessionKey), text: `calls ${p.name ?? "a tool"}` };
      if (p.kind === "tool-result")
        return { actor: shortKey(p.sessionKey), text: `got the result of ${p.name ?? "a tool"}` };
      return options.verbose ? { actor: shortKey(p.sessionKey), text: `… ${quote(p.text, 60)}` } : undefined;
    }
    case "run.ended": {
      const p = payloadOf(event, "run.ended");
      if (p.status === "ok") return { actor: shortKey(p.sessionKey), text: `replied ${quote(p.reply)}` };
      return { actor: shortKey(p.sessionKey), text: `run ${p.status}: ${p.error ?? "no details"}` };
    }
    case "session.taint": {
      const p = payloadOf(event, "session.taint");
      return { actor: shortKey(p.key), text: `taint ${p.from} → ${p.to} (${p.reason})` };
    }
    case "delivery": {
      const p = payloadOf(event, "delivery");
      return { actor: shortKey(p.sessionKey), text: `posted to ${p.channel}:${p.to} ${quote(p.text)}` };
    }
    case "policy.blocked": {
      const p = payloadOf(event, "policy.blocked");
      return {
        actor: "gateway",
        text: `BLOCKED at ${p.hook}${p.ruleId ? ` (rule ${p.ruleId})` : ""}: ${p.message}`,
      };
    }
    case "session.updated": {
      const p = payloadOf(event, "session.updated");
      return options.verbose ? { actor: shortKey(p.key), text: `session ${p.reason}` } : undefined;
    }
    case "audit.appended": {
      const p = payloadOf(event, "audit.appended");
      return {
        actor: "audit",
        text: `#${p.index} ${p.kind}${p.sessionKey ? ` (${shortKey(p.sessionKey)})` : ""}`,
      };
    }
    default:
      return options.verbose
        ? { actor: "gateway", text: `${event.event} ${JSON.stringify(event.payload)}` }
        : undefined;
  }
}
