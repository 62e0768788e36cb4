import { randomUUID } from "node:crypto";
import { type SessionEntry, type Store, SwitchboardError } from "@switchboard/core";
import type { Connection } from "../connection";
import type { SessionsService } from "../sessions-service";

/** `/send` arguments; a Map, so `/send constructor` is just an unknown argument. */
const SEND_COMMAND_ARGUMENTS = new Map<string, "allow" | "deny" | null>([
  ["on", "allow"],
  ["off", "deny"],
  ["inherit", null],
]);

/** Whether an input message is the `/send` command rather than a message for the agent. */
export function isSendCommand(trimmed: string): boolean {
  return trimmed === "/send" || trimmed.startsWith("/send ");
}

/** Only an operator may type `/send`: checked before the session is created for it. */
export function requireSendCommandRole(connection: Connection, key: string): void {
  if (connection.identity!.role !== "operator") {
    throw new SwitchboardError(
      "FORBIDDEN",
      `only an operator may change the send policy of ${key}: /send is refused for ${connection.identity!.role} connections (an operator uses /send or sessions.patch sendPolicy)`,
    );
  }
}

/**
 * `/send on|off|inherit` typed into a session by its owner, the operator. A client may not lift
 * (or set) the send policy an operator or a rule imposes: its `/send` is refused and audited.
 * The exchange is kept as a finished run, so it reads like any other turn.
 */
export async function sendCommand(
  sessions: SessionsService,
  runs: Pick<Store["runs"], "put">,
  connection: Connection,
  entry: SessionEntry,
  text: string,
): Promise<{ runId: string; status: "accepted" }> {
  requireSendCommandRole(connection, entry.key);
  const argument = text.slice("/send".length).trim();
  const value = SEND_COMMAND_ARGUMENTS.get(argument);
  let reply: string;
  if (value === undefined) {
    reply = "usage: /send on|off|inherit";
  } else {
    await sessions.update(
      entry.key,
      (current) => {
        if (value === null) delete current.sendPolicy;
        else current.sendPolicy = value;
        return current;
      },
      "send-policy",
    );
    reply = value === null ? "send policy: inherit" : `send policy: ${value}`;
  }
  const runId = randomUUID();
  const now = Date.now();
  await sessions.append(entry.key, [
    {
      type: "message",
      label: entry.taint,
      runId,
      message: { role: "user", content: [{ type: "text", text }] },
    },
    {
      type: "message",
      label: entry.taint,
      runId,
      message: { role: "system", content: [{ type: "text", text: reply }] },
    },
  ]);
  await runs.put({
    runId,
    sessionKey: entry.key,
    sessionId: entry.sessionId,
    agentId: entry.agentId,
    lane: "main",
    status: "ok",
    createdAt: now,
    startedAt: now,
    endedAt: now,
    origin: "chat",
    message: text,
    reply,
    attempts: 0,
  });
  return { runId, status: "accepted" };
}
