/**
 * Pure helpers of the views: no DOM, no connection, so they are unit-tested in Node. Everything here
 * returns plain strings or data; the views render them as text (never as markup).
 */

export interface HistoryMessage {
  seq: number;
  id: string;
  ts: number;
  role: string;
  content: Array<Record<string, unknown>>;
  label: string;
  provenance?: Provenance | undefined;
  clipped?: { bytes: number } | undefined;
}

export type Provenance =
  | { kind: "user"; channel?: string | undefined; from?: string | undefined }
  | {
      kind: "agent";
      fromSessionKey: string;
      fromRunId: string;
      chainId: string;
      hop: number;
      step?: "send" | "reply" | "announce" | undefined;
    }
  | { kind: "subagent"; childSessionKey: string; runId: string }
  | { kind: "operator"; actor?: string | undefined }
  | { kind: "system" };

/** "12 s ago", "3 min ago", "5 h ago", "2 d ago"; "in the future" for clock skew. */
export function relativeTime(ts: number, now: number): string {
  const seconds = Math.round((now - ts) / 1000);
  if (seconds < -5) return "in the future";
  if (seconds < 60) return `${Math.max(0, seconds)} s ago`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ago`;
  return `${Math.floor(hours / 24)} d ago`;
}

/** A duration in words for ages of runs: "850 ms", "12 s", "4 min 3 s". */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${seconds % 60} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** Where an entry came from, in the words an operator reads beside it. */
export function provenanceText(provenance: Provenance | undefined): string | undefined {
  if (!provenance) return undefined;
  switch (provenance.kind) {
    case "user": {
      const who = provenance.from ? `user ${provenance.from}` : "user";
      return provenance.channel ? `${who} on ${provenance.channel}` : who;
    }
    case "agent": {
      const step = provenance.step && provenance.step !== "send" ? `, ${provenance.step}` : "";
      return `from ${provenance.fromSessionKey} (hop ${provenance.hop}${step})`;
    }
    case "subagent":
      return `report of sub-agent ${provenance.childSessionKey}`;
    case "operator":
      return provenance.actor ? `operator ${provenance.actor}` : "operator";
    case "system":
      return "system";
  }
}

/** The text parts of a message, joined. */
export function messageText(message: Pick<HistoryMessage, "content">): string {
  return message.content
    .filter((part) => part.type === "text" && typeof part.text === "string")
    .map((part) => part.text as string)
    .join("\n");
}

export interface ToolCallItem {
  type: "tool";
  /** The transcript entry holding the call. */
  seq: number;
  ts: number;
  label: string;
  id: string;
  name: string;
  args: unknown;
  result?: { value: unknown; label: string; seq: number } | undefined;
}

export interface MessageItem {
  type: "message";
  message: HistoryMessage;
  text: string;
}

export type TranscriptItem = MessageItem | ToolCallItem;

/**
 * The transcript as the Session view shows it: messages with text, and each tool call paired with the
 * result carrying its id (parallel calls included), placed where the call was made. A result whose call
 * is not on the loaded pages (older than the oldest page) is shown as a call of unknown arguments.
 */
export function transcriptItems(messages: readonly HistoryMessage[]): TranscriptItem[] {
  const items: TranscriptItem[] = [];
  const calls = new Map<string, ToolCallItem>();
  for (const message of messages) {
    const text = messageText(message);
    let hasToolParts = false;
    for (const part of message.content) {
      if (part.type === "toolCall" && typeof part.id === "string") {
        hasToolParts = true;
        const item: ToolCallItem = {
          type: "tool",
          seq: message.seq,
          ts: message.ts,
          label: message.label,
          id: part.id,
          name: String(part.name ?? "?"),
          args: part.args,
        };
        calls.set(part.id, item);
        items.push(item);
      } else if (part.type === "toolResult" && typeof part.toolCallId === "string") {
        hasToolParts = true;
        const result = { value: part.result, label: message.label, seq: message.seq };
        const call = calls.get(part.toolCallId);
        if (call) call.result = result;
        else {
          items.push({
            type: "tool",
            seq: message.seq,
            ts: message.ts,
            label: message.label,
            id: part.toolCallId,
            name: String(part.name ?? "?"),
            args: undefined,
            result,
          });
        }
      }
    }
    if (text !== "" || !hasToolParts) items.push({ type: "message", message, text });
  }
  return items;
}

/** The status word of a tool result (`ok`, `forbidden`, …), for the collapsed line. */
export function toolStatus(result: unknown): string | undefined {
  if (typeof result === "object" && result !== null && "status" in result) {
    const status = (result as { status: unknown }).status;
    return typeof status === "string" ? status : undefined;
  }
  return undefined;
}

/** Pretty JSON for the expanded tool call; `undefined` reads as "(not on the loaded pages)". */
export function prettyJson(value: unknown): string {
  if (value === undefined) return "(not on the loaded pages)";
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** Merges pages of history by `seq` (no duplicates), oldest first. */
export function mergeMessages(
  current: readonly HistoryMessage[],
  incoming: readonly HistoryMessage[],
): HistoryMessage[] {
  const bySeq = new Map<number, HistoryMessage>();
  for (const message of current) bySeq.set(message.seq, message);
  for (const message of incoming) bySeq.set(message.seq, message);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/** Reads `#token=…` from a location hash; other fragment parameters are ignored. */
export function tokenFromFragment(hash: string): string | undefined {
  const params = new URLSearchParams(hash.startsWith("#") ? hash.slice(1) : hash);
  const token = params.get("token");
  return token ? token : undefined;
}

/** Kept in step with core's LEVELS (a test checks it); here so the pure helpers need no import. */
export const LEVELS = ["PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED"] as const;

/** CSS class of a label badge (colour per level; unknown levels get the neutral badge). */
export function levelClass(level: string | undefined): string {
  const known = (LEVELS as readonly string[]).includes(level ?? "");
  return known ? `badge level-${level!.toLowerCase()}` : "badge";
}

/** Parses the simulator's arguments box: a JSON object, or an error naming the field and the rule. */
export function parseArgs(
  text: string,
): { ok: true; value: Record<string, unknown> } | { ok: false; error: string } {
  if (text.trim() === "") return { ok: true, value: {} };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { ok: false, error: `Arguments: not valid JSON (${(error as Error).message})` };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { ok: false, error: 'Arguments: must be a JSON object, e.g. {"sessionKey": "main"}' };
  }
  return { ok: true, value: value as Record<string, unknown> };
}

export interface AuditRow {
  index: number;
  at: number;
  kind: string;
  decision: string;
  rule: string;
  hook: string;
  caller: string;
  target: string;
  reason: string;
}

function str(value: unknown): string {
  if (value === undefined || value === null) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** One audit record as a row of the Audit view. */
export function auditRow(entry: Record<string, unknown>): AuditRow {
  const data = (typeof entry.data === "object" && entry.data !== null ? entry.data : {}) as Record<
    string,
    unknown
  >;
  const kind = str(entry.kind);
  const decision =
    kind === "policy.blocked"
      ? "BLOCK"
      : kind === "policy.redacted"
        ? "REDACT"
        : typeof data.decision === "string"
          ? data.decision
          : "";
  const caller = [str(entry.actor), str(entry.sessionKey)].filter((part) => part !== "").join(" · ");
  return {
    index: typeof entry.index === "number" ? entry.index : -1,
    at: typeof entry.at === "number" ? entry.at : 0,
    kind,
    decision,
    rule: str(data.ruleId),
    hook: str(data.hook),
    caller,
    target: str(data.target ?? data.to ?? data.childSessionKey),
    reason: str(data.message ?? data.reason ?? data.error),
  };
}

/** Case-insensitive match of every word of `query` somewhere in the row. */
export function auditMatches(row: AuditRow, query: string, kind: string): boolean {
  if (kind !== "" && row.kind !== kind) return false;
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return true;
  const haystack = Object.values(row).join(" ").toLowerCase();
  return words.every((word) => haystack.includes(word));
}

export interface Edge {
  from: string;
  to: string;
  kind: "send" | "spawn";
}

/** Lays nodes of a small graph on a circle (the topology of active chains). */
export function circleLayout(
  nodes: readonly string[],
  width: number,
  height: number,
): Map<string, { x: number; y: number }> {
  const positions = new Map<string, { x: number; y: number }>();
  const radius = Math.max(0, Math.min(width, height) / 2 - 60);
  nodes.forEach((node, index) => {
    if (nodes.length === 1) {
      positions.set(node, { x: width / 2, y: height / 2 });
      return;
    }
    const angle = (2 * Math.PI * index) / nodes.length - Math.PI / 2;
    positions.set(node, {
      x: width / 2 + radius * Math.cos(angle),
      y: height / 2 + radius * Math.sin(angle),
    });
  });
  return positions;
}

/** Edges worth drawing: unique, between two distinct sessions. */
export function uniqueEdges(edges: readonly Edge[]): Edge[] {
  const seen = new Set<string>();
  const out: Edge[] = [];
  for (const edge of edges) {
    if (edge.from === edge.to) continue;
    const id = `${edge.kind}\u0000${edge.from}\u0000${edge.to}`;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push(edge);
  }
  return out;
}
