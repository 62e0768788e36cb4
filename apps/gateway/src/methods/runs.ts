import { type Level, type RunRecord, SwitchboardError } from "@switchboard/core";
import type { Connection } from "../connection";
import { InProcessSessionLocks } from "../ports/session-locks";
import { endedInput } from "../run-scheduler";
import type { MethodDeps } from "./deps";
import type { Handlers, ParsedParams } from "./handler";
import { isSendCommand, requireSendCommandRole, sendCommand } from "./send-command";

type RunMethods =
  | "chat.send"
  | "agent"
  | "agent.wait"
  | "run.progress"
  | "run.complete"
  | "run.fail"
  | "runs.list";

/** Input into sessions (clients, operators) and the run lifecycle reported by workers. */
export function runMethods({
  config,
  store,
  sessions,
  policy,
  scheduler,
  bus,
  access,
  toolCalls,
}: Pick<
  MethodDeps,
  "config" | "store" | "sessions" | "policy" | "scheduler" | "bus" | "access" | "toolCalls"
>): Handlers<RunMethods> {
  const agentTimeout = (agentId: string): number =>
    sessions.agentConfig(agentId)?.timeoutSeconds ?? config.agents.defaults.timeoutSeconds;

  /** Input from outside (a channel client or an operator) into a session. */
  const input = async (
    connection: Connection,
    params: ParsedParams<"chat.send"> & Partial<ParsedParams<"agent">>,
    origin: "chat" | "agent",
  ): Promise<{ runId: string; status: "accepted" }> => {
    const key = await sessions.resolveInput(params.sessionKey);
    access.requireClientSession(connection, key, params.sessionKey);
    if (params.idempotencyKey) {
      const existing = await store.runs.getByIdempotencyKey(params.idempotencyKey);
      if (existing) {
        if (existing.sessionKey !== key)
          throw new SwitchboardError("CONFLICT", "idempotencyKey: already used for another session");
        // A key names one input: a retry carries the same one. Another message under it would be
        // dropped while the caller heard "accepted". The record keeps the message as stored (its
        // head once the run ended; rewritten by a PRE_SEND redact rule, when one is configured,
        // which this check then cannot see through).
        const kept = existing.message;
        const redactsInput = config.policy.rules.some(
          (rule) => rule.hook === "PRE_SEND" && rule.action === "redact",
        );
        if (!redactsInput && kept !== params.message && kept !== endedInput(params.message))
          throw new SwitchboardError("CONFLICT", "idempotencyKey: already used for another message");
        if (existing.origin !== origin)
          throw new SwitchboardError(
            "CONFLICT",
            `idempotencyKey: already used for a ${existing.origin} input`,
          );
        // The run's lane and time limit were the first call's: another under the same key would be
        // ignored as silently as another message.
        if ((params.lane ?? "main") !== existing.lane)
          throw new SwitchboardError(
            "CONFLICT",
            `idempotencyKey: already used for an input on lane ${existing.lane}`,
          );
        if (params.timeoutSeconds && params.timeoutSeconds !== existing.timeoutSeconds)
          throw new SwitchboardError(
            "CONFLICT",
            `idempotencyKey: already used for an input with timeoutSeconds ${existing.timeoutSeconds ?? "unset"}`,
          );
        return { runId: existing.runId, status: "accepted" };
      }
    }
    const trimmed = params.message.trim();
    if (isSendCommand(trimmed)) {
      requireSendCommandRole(connection, key);
      const { entry } = await sessions.ensure(key);
      return sendCommand(sessions, store.runs, connection, entry, trimmed);
    }
    // Decided on the row the input would create, when there is none yet: a refused input leaves no
    // session behind.
    const current = (await sessions.get(key)) ?? sessions.draft(key);
    const label: Level = sessions.inboundLevel(current);
    const decision = await policy.enforce(
      { hook: "PRE_SEND", target: policy.facts(current), dataLabel: label, text: params.message },
      connection.identity!.tokenName,
    );
    if (decision.action === "BLOCK")
      throw new SwitchboardError("FORBIDDEN", decision.message, { details: { ruleId: decision.ruleId } });
    const { entry } = await sessions.ensure(key);
    await sessions.raiseTaint(
      key,
      label,
      `input on ${sessions.channel(entry)}`,
      `channel:${sessions.channel(entry)}`,
    );
    const { record } = await scheduler.enqueue({
      sessionKey: key,
      lane: params.lane ?? "main",
      origin,
      message: decision.text ?? params.message,
      provenance:
        origin === "chat"
          ? { kind: "user", channel: sessions.channel(entry) }
          : { kind: "operator", actor: connection.identity!.tokenName },
      label,
      // 0 is no limit of the call's own: the agent's run timeout applies (a run with none would
      // hold its lane, and every later input of the session, for good).
      timeoutSeconds: params.timeoutSeconds || agentTimeout(entry.agentId),
      ...(params.idempotencyKey ? { idempotencyKey: params.idempotencyKey } : {}),
    });
    return { runId: record.runId, status: "accepted" };
  };

  // Inputs to one session lane are accepted one after another, in the order they arrived: each goes
  // through several awaits (session, policy, taint) before the scheduler sees it, and a later one
  // must not reach the lane first (runs of a lane execute in arrival order). Keyed by the session
  // as given; the lane queue orders what reached it.
  const arrivals = new InProcessSessionLocks();
  // Inputs carrying one idempotency key are taken one at a time too, whatever session they name:
  // the second finds the first's run (or its refusal) before it writes anything.
  const keyed = new InProcessSessionLocks();
  const inOrder = (
    connection: Connection,
    params: ParsedParams<"chat.send"> & Partial<ParsedParams<"agent">>,
    origin: "chat" | "agent",
  ) =>
    arrivals.run(`${params.sessionKey}\u0000${params.lane ?? "main"}`, () =>
      params.idempotencyKey
        ? keyed.run(params.idempotencyKey, () => input(connection, params, origin))
        : input(connection, params, origin),
    );

  return {
    "chat.send": (params, connection) => inOrder(connection, params, "chat"),
    agent: (params, connection) => inOrder(connection, params, "agent"),
    "agent.wait": async (params, connection) => {
      await access.requireRunAccess(connection, params.runId);
      const { stillRunning: _, ...result } = await scheduler.wait(
        params.runId,
        params.timeoutMs ?? 30_000,
        connection.closedSignal,
      );
      return result;
    },
    "run.progress": async (params, connection) => {
      const record = access.heldRun(connection, params.runId);
      if (params.kind === "tool-call" || params.kind === "tool-result") {
        await toolCalls.recordWorkerEvent(record, { ...params, kind: params.kind });
      }
      bus.publish(
        "run.progress",
        {
          runId: record.runId,
          sessionKey: record.sessionKey,
          kind: params.kind,
          ...(params.text !== undefined ? { text: params.text } : {}),
          ...(params.name !== undefined ? { name: params.name } : {}),
          ...(params.toolCallId !== undefined ? { toolCallId: params.toolCallId } : {}),
        },
        { sessionKey: record.sessionKey, agentId: record.agentId },
      );
      return {};
    },
    "run.complete": async (params, connection) => {
      await scheduler.complete(params.runId, connection, params.reply, params.usage);
      return {};
    },
    "run.fail": async (params, connection) => {
      await scheduler.fail(params.runId, connection, params.error);
      return {};
    },
    "runs.list": async (params) => {
      const statuses = new Set(params.statuses ?? ["queued", "running"]);
      const limit = params.limit ?? 50;
      const sessionKey = params.sessionKey ? await sessions.resolveInput(params.sessionKey) : undefined;
      const wanted = (run: RunRecord) =>
        statuses.has(run.status) &&
        (sessionKey === undefined || run.sessionKey === sessionKey) &&
        (params.agentId === undefined || run.agentId === params.agentId);
      // This process's runs not ended yet are the freshest copy; the store adds every other run —
      // in cluster mode that includes the runs other instances hold, so every instance lists the
      // cluster's runs (a stored copy may lag its holder's by one write, never by a run's end).
      const byId = new Map<string, RunRecord>();
      for (const run of scheduler.activeRecords()) if (wanted(run)) byId.set(run.runId, run);
      const stored = await store.runs.list({
        statuses: [...statuses] as RunRecord["status"][],
        ...(sessionKey ? { sessionKey } : {}),
        ...(params.agentId !== undefined ? { agentId: params.agentId } : {}),
        limit: limit + byId.size,
      });
      for (const run of stored) if (wanted(run) && !byId.has(run.runId)) byId.set(run.runId, run);
      const runs = [...byId.values()]
        .sort((a, b) => b.createdAt - a.createdAt || a.runId.localeCompare(b.runId))
        .slice(0, limit)
        .map((run) => ({
          runId: run.runId,
          sessionKey: run.sessionKey,
          agentId: run.agentId,
          lane: run.lane,
          status: run.status,
          origin: run.origin,
          createdAt: run.createdAt,
          attempts: run.attempts,
          ...(run.startedAt !== undefined ? { startedAt: run.startedAt } : {}),
          ...(run.endedAt !== undefined ? { endedAt: run.endedAt } : {}),
          ...(run.error !== undefined ? { error: run.error } : {}),
        }));
      return { runs };
    },
  };
}
