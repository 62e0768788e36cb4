import { canFlowTo, type Level, LOWEST_LEVEL, maxLevel, minLevel } from "../labels/level";
import type { PolicyContext, SessionFacts } from "./context";

/** The level of the data a session writes: its taint, or higher when the data carries a higher label. */
export function outgoingLevel(ctx: PolicyContext): Level {
  return maxLevel(ctx.caller?.taint ?? LOWEST_LEVEL, ctx.dataLabel ?? LOWEST_LEVEL);
}

/**
 * The level of the data the caller takes in on this hook, or undefined when it takes in nothing:
 * another session's history/status (its taint, or `dataLabel` when higher) on PRE_HISTORY, a
 * tool's result label (`dataLabel`) on PRE_TOOL_CALL.
 */
export function incomingLevel(ctx: PolicyContext): Level | undefined {
  if (ctx.hook === "PRE_HISTORY") {
    if (!ctx.target && ctx.dataLabel === undefined) throw new Error("PRE_HISTORY context has no target");
    return maxLevel(ctx.target?.taint ?? LOWEST_LEVEL, ctx.dataLabel ?? LOWEST_LEVEL);
  }
  if (ctx.hook === "PRE_TOOL_CALL") return ctx.dataLabel;
  return undefined;
}

/**
 * The highest taint of a row `sessions_list` shows the caller (with its previews): its current
 * taint, so listing never escalates, and never above its clearance. A clearance an operator lowered
 * below the taint (`sessions.patch` with `force`) keeps what the session holds but lets no more in,
 * and a preview is as much a read of that session as its history.
 */
export function discoveryCeiling(caller: Pick<SessionFacts, "taint" | "clearance">): Level {
  return minLevel(caller.taint, caller.clearance);
}

/**
 * No read-up: data above the caller's clearance is refused. For `sessions_list` discovery
 * (`facts.discovery`) the bar is `discoveryCeiling`. Operator reads (no caller) are not a session
 * taking in data.
 */
export function readUpViolation(ctx: PolicyContext): string | undefined {
  const caller = ctx.caller;
  if (!caller) return undefined;
  const incoming = incomingLevel(ctx);
  if (incoming === undefined) return undefined;
  const what =
    ctx.hook === "PRE_HISTORY"
      ? `${ctx.target?.key ?? "data"} (taint ${incoming})`
      : `${ctx.tool ? `results of tool ${ctx.tool.name}` : "data"} (label ${incoming})`;
  if (ctx.facts?.discovery) {
    const bar = canFlowTo(caller.taint, caller.clearance)
      ? `the current taint ${caller.taint}`
      : `the clearance ${caller.clearance}`;
    return canFlowTo(incoming, discoveryCeiling(caller))
      ? undefined
      : `hidden: ${what} is above ${bar} of ${caller.key}`;
  }
  return canFlowTo(incoming, caller.clearance)
    ? undefined
    : `read-up blocked: ${what} cannot flow to ${caller.key} (clearance ${caller.clearance})`;
}

/**
 * No write-down: a write at level T reaches a session only if T <= its clearance (PRE_SEND,
 * PRE_SPAWN), and a channel recipient only if T <= its classification (PRE_OUTPUT).
 */
export function writeDownViolation(ctx: PolicyContext): string | undefined {
  const level = outgoingLevel(ctx);
  const what = ctx.caller && level === ctx.caller.taint ? `session taint ${level}` : `data label ${level}`;
  if (ctx.hook === "PRE_SEND" || ctx.hook === "PRE_SPAWN") {
    const target = ctx.target;
    if (!target) throw new Error(`${ctx.hook} context has no target`);
    return canFlowTo(level, target.clearance)
      ? undefined
      : `write-down blocked: ${what} cannot flow to ${target.key} (clearance ${target.clearance})`;
  }
  if (ctx.hook === "PRE_OUTPUT") {
    const recipient = ctx.recipient;
    if (!recipient) throw new Error("PRE_OUTPUT context has no recipient");
    const name = recipient.to === undefined ? recipient.channel : `${recipient.channel}:${recipient.to}`;
    return canFlowTo(level, recipient.level)
      ? undefined
      : `write-down blocked: ${what} cannot flow to ${name} (classification ${recipient.level})`;
  }
  return undefined;
}
