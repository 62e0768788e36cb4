import type { HistoryMessage } from "@switchboard/core";

/** A transcript message as one line of text: its text parts, tool calls and tool results. */
export function messageText(message: Pick<HistoryMessage, "content">): string {
  return message.content
    .map((part) => {
      if (part.type === "text") return String(part.text ?? "");
      if (part.type === "toolCall") return `→ ${String(part.name)}(${compactJson(part.args)})`;
      if (part.type === "toolResult") return `← ${String(part.name)}: ${compactJson(part.result)}`;
      return compactJson(part);
    })
    .join(" ");
}

/** Where a message came from, in a few words (empty for a user's own message). */
export function provenanceText(message: Pick<HistoryMessage, "provenance">): string {
  const provenance = message.provenance;
  if (!provenance) return "";
  switch (provenance.kind) {
    case "agent":
      return `from ${provenance.fromSessionKey}${provenance.step && provenance.step !== "send" ? ` (${provenance.step} step)` : ""}`;
    case "subagent":
      return `report of ${provenance.childSessionKey}`;
    case "operator":
      return `operator${provenance.actor ? ` ${provenance.actor}` : ""}`;
    case "system":
      return "system";
    default:
      // The session's own channel says nothing new; only a named outside channel is worth showing.
      return provenance.channel && provenance.channel !== "unknown" && provenance.channel !== "internal"
        ? `via ${provenance.channel}`
        : "";
  }
}

export function compactJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
