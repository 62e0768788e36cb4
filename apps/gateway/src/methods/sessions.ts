import {
  activeSinceMinutes,
  canFlowTo,
  clampInteger,
  displayKey,
  HISTORY_LIMIT,
  HISTORY_MAX_BYTES,
  isSessionKind,
  SESSIONS_LIST_LIMIT,
  SESSIONS_LIST_MESSAGE_LIMIT,
  SwitchboardError,
} from "@switchboard/core";
import { capHistory } from "@switchboard/tools";
import { RESET_WHILE_RUNNING } from "../run-scheduler";
import { toHistoryMessage } from "../session-tools-backend";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

type SessionMethods =
  | "sessions.list"
  | "sessions.resolve"
  | "sessions.history"
  | "sessions.status"
  | "sessions.create"
  | "sessions.patch"
  | "sessions.reset"
  | "sessions.delete";

/** The operator's (and, for history and status, a client's) view of sessions. */
export function sessionMethods({
  store,
  sessions,
  audit,
  backend,
  access,
  scheduler,
}: Pick<
  MethodDeps,
  "store" | "sessions" | "audit" | "backend" | "access" | "scheduler"
>): Handlers<SessionMethods> {
  return {
    "sessions.list": async (params) => {
      const limit = clampInteger(params.limit, SESSIONS_LIST_LIMIT);
      const kinds = params.kinds?.filter(isSessionKind);
      const result = await sessions.index.list({
        limit,
        mainKey: sessions.mainKey,
        ...(kinds?.length ? { kinds } : {}),
        ...(params.activeMinutes && params.activeMinutes > 0
          ? { activeSince: activeSinceMinutes(params.activeMinutes) }
          : {}),
        ...(params.agentId ? { agentId: params.agentId.toLowerCase() } : {}),
        ...(params.search ? { search: params.search } : {}),
        ...(params.label ? { label: params.label } : {}),
        ...(params.spawnedBy
          ? { spawnedBy: await sessions.resolveInput(params.spawnedBy, undefined, "spawnedBy") }
          : {}),
        ...(params.cursor !== undefined ? { after: decodeListCursor(params.cursor) } : {}),
      });
      const messageLimit = clampInteger(params.messageLimit, SESSIONS_LIST_MESSAGE_LIMIT);
      const rows = await backend.rowsWithMessages(result.entries, undefined, messageLimit);
      const last = result.entries.at(-1);
      return {
        status: "ok",
        count: rows.length,
        sessions: rows,
        hidden: result.hidden,
        ...(last && result.entries.length >= limit ? { nextCursor: encodeListCursor(last) } : {}),
      };
    },
    "sessions.resolve": async (params) => {
      if (params.key !== undefined || params.sessionId !== undefined) {
        const key =
          params.key !== undefined
            ? await sessions.resolveInput(params.key, params.agentId, "key")
            : await sessions.resolveInput(params.sessionId!, undefined, "sessionId");
        const entry = await sessions.require(key);
        return { key: displayKey(entry.key, undefined, sessions.mainKey), sessionId: entry.sessionId };
      }
      const found = await sessions.index.list({
        label: params.label!,
        limit: 2,
        ...(params.agentId ? { agentId: params.agentId.toLowerCase() } : {}),
      });
      if (found.entries.length === 0)
        throw new SwitchboardError("NOT_FOUND", `no session has label ${params.label}`);
      if (found.entries.length > 1) {
        throw new SwitchboardError(
          "CONFLICT",
          `label ${params.label} is ambiguous: ${found.entries.map((e) => e.key).join(", ")}`,
        );
      }
      return { key: found.entries[0]!.key, sessionId: found.entries[0]!.sessionId };
    },
    "sessions.history": async (params, connection) => {
      const key = await sessions.resolveInput(params.sessionKey);
      access.requireClientSession(connection, key, params.sessionKey);
      const entry = await sessions.require(key);
      const limit = clampInteger(params.limit, HISTORY_LIMIT);
      const cap = params.maxBytes ?? HISTORY_MAX_BYTES;
      const read = await store.transcripts.read(entry.sessionId, {
        limit,
        maxBytes: cap,
        filter: (item) =>
          item.type === "message" && (params.includeTools === true || item.message?.role !== "toolResult"),
        ...(params.before !== undefined ? { before: Math.floor(params.before) } : {}),
      });
      return capHistory(
        {
          status: "ok",
          sessionKey: displayKey(entry.key, undefined, sessions.mainKey),
          sessionId: entry.sessionId,
          messages: read.entries.map(toHistoryMessage),
          truncated: read.truncated,
          ...(read.nextBefore !== undefined ? { nextBefore: read.nextBefore } : {}),
          ...(read.damaged ? { damaged: read.damaged } : {}),
        },
        cap,
      );
    },
    "sessions.status": async (params, connection) => {
      const key = await sessions.resolveInput(params.sessionKey);
      access.requireClientSession(connection, key, params.sessionKey);
      return backend.statusOf(await sessions.require(key), undefined);
    },
    "sessions.create": async (params, connection) => {
      const key = await sessions.resolveInput(params.key, undefined, "key");
      const { entry, created } = await sessions.ensure(key, {
        ...(params.channel ? { channel: params.channel } : {}),
        ...(params.chatType ? { chatType: params.chatType } : {}),
        ...(params.label ? { label: params.label } : {}),
        ...(params.displayName ? { displayName: params.displayName } : {}),
        ...(params.clearance ? { clearance: params.clearance } : {}),
      });
      if (created) {
        await audit.append({
          kind: "session.created",
          actor: connection.identity!.tokenName,
          sessionKey: key,
          data: { clearance: entry.clearance },
        });
      }
      return { key: entry.key, sessionId: entry.sessionId, created };
    },
    "sessions.patch": async (params, connection) => {
      const key = await sessions.resolveInput(params.key, undefined, "key");
      const entry = await sessions.update(
        key,
        (current) => {
          const set = <K extends "label" | "sendPolicy" | "model" | "displayName">(
            field: K,
            value: unknown,
          ) => {
            if (value === undefined) return;
            if (value === null) delete current[field];
            else (current as Record<string, unknown>)[field] = value;
          };
          set("label", params.label);
          set("sendPolicy", params.sendPolicy);
          set("model", params.model);
          set("displayName", params.displayName);
          if (params.clearance) {
            if (!canFlowTo(current.taint, params.clearance) && params.force !== true) {
              throw new SwitchboardError(
                "CONFLICT",
                `clearance: ${params.clearance} is below the current taint ${current.taint} of ${current.key}; reset the session first, or pass force: true to keep data above its clearance`,
                { details: { field: "clearance", taint: current.taint } },
              );
            }
            current.clearance = params.clearance;
            current.clearancePinned = true;
          }
          return current;
        },
        "patched",
      );
      await audit.append({
        kind: "session.patched",
        actor: connection.identity!.tokenName,
        sessionKey: key,
        data: {
          fields: Object.keys(params).filter((field) => field !== "key" && field !== "force"),
          ...(params.clearance ? { clearance: params.clearance, taint: entry.taint } : {}),
          ...(params.force ? { forced: true } : {}),
        },
      });
      return { key, entry };
    },
    "sessions.reset": async (params, connection) => {
      const key = await sessions.resolveInput(params.key, undefined, "key");
      const entry = await sessions.reset(key);
      // Runs of the old transcript end here: they read under the old taint, which the reset dropped.
      await scheduler.endRunsBefore(key, entry.sessionId, RESET_WHILE_RUNNING);
      await audit.append({
        kind: "session.reset",
        actor: connection.identity!.tokenName,
        sessionKey: key,
        data: { sessionId: entry.sessionId },
      });
      return { key, sessionId: entry.sessionId };
    },
    "sessions.delete": async (params, connection) => {
      const key = await sessions.resolveInput(params.key, undefined, "key");
      const entry = await sessions.require(key);
      if (sessions.kind(entry) === "main")
        throw new SwitchboardError("FORBIDDEN", "the main session cannot be deleted");
      await sessions.delete(key);
      await audit.append({
        kind: "session.deleted",
        actor: connection.identity!.tokenName,
        sessionKey: key,
        data: {},
      });
      return { key, deleted: true };
    },
  };
}

/** An opaque page cursor: the position (updatedAt, stored key) of a page's last row. */
function encodeListCursor(row: { updatedAt: number; key: string }): string {
  return Buffer.from(JSON.stringify([row.updatedAt, row.key]), "utf8").toString("base64url");
}

function decodeListCursor(cursor: string): { updatedAt: number; key: string } {
  try {
    const [updatedAt, key] = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown[];
    if (typeof updatedAt === "number" && Number.isFinite(updatedAt) && typeof key === "string")
      return { updatedAt, key };
  } catch {
    // Reported below.
  }
  throw new SwitchboardError("INVALID_REQUEST", "cursor: not a nextCursor from sessions.list", {
    details: { field: "cursor" },
  });
}
