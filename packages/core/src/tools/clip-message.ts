import type { HistoryMessage } from "./tool-schemas";

const encoder = new TextEncoder();

function jsonBytes(value: unknown): number {
  return encoder.encode(JSON.stringify(value)).length;
}

/**
 * A copy of `message` within `budget` bytes of JSON: whole content parts while they fit, then the
 * longest prefix of the next text part, marked `clipped` with the message's full size. Undefined
 * when not even the envelope fits. Shared by every history with a byte cap (`sessions_history`,
 * `run.assigned`), so a message too big for one is cut the same way everywhere.
 */
export function clipMessage(message: HistoryMessage, budget: number): HistoryMessage | undefined {
  const clipped = { bytes: jsonBytes(message) };
  const base = jsonBytes({ ...message, content: [], clipped });
  let room = budget - base;
  if (room < 0) return undefined;
  const content: HistoryMessage["content"] = [];
  for (const part of message.content) {
    const size = jsonBytes(part) + (content.length > 0 ? 1 : 0);
    if (size <= room) {
      content.push(part);
      room -= size;
      continue;
    }
    const text = part.text;
    if (part.type === "text" && typeof text === "string") {
      const comma = content.length > 0 ? 1 : 0;
      let low = 0;
      let high = text.length;
      while (low < high) {
        const middle = (low + high + 1) >>> 1;
        if (jsonBytes({ ...part, text: text.slice(0, middle) }) + comma <= room) low = middle;
        else high = middle - 1;
      }
      // Never end on half of a surrogate pair.
      const code = text.charCodeAt(low - 1);
      if (low > 0 && code >= 0xd800 && code <= 0xdbff) low -= 1;
      if (low > 0) content.push({ ...part, text: text.slice(0, low) });
    }
    break;
  }
  return { ...message, content, clipped };
}
