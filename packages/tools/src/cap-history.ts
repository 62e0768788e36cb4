import { clipMessage, type SessionsHistoryResult } from "@switchboard/core";

const encoder = new TextEncoder();

function byteLength(value: unknown): number {
  return encoder.encode(JSON.stringify(value)).length;
}

/**
 * Keeps a history result within `maxBytes` of JSON by dropping whole messages from the old end. The
 * backend is asked to cap too; this is the guarantee that an oversized page never reaches the model
 * and that a cut is always flagged with `truncated: true` and a `nextBefore` to page back from.
 */
export function capHistory(result: SessionsHistoryResult, maxBytes: number): SessionsHistoryResult {
  if (byteLength(result) <= maxBytes) return result;
  const { messages } = result;
  // Measure the envelope with the fields a cut adds, at their widest, so the final size never overshoots.
  const envelope = byteLength({
    ...result,
    messages: [],
    truncated: true,
    nextBefore: Number.MAX_SAFE_INTEGER,
  });
  const sizes = messages.map(byteLength);
  // Each kept message adds its own JSON plus one separating comma (one fewer than messages in total).
  let total = envelope + sizes.reduce((sum, size) => sum + size + 1, 0) - (sizes.length > 0 ? 1 : 0);
  let start = 0;
  while (start < messages.length && total > maxBytes) {
    total -= sizes[start]! + (messages.length - start > 1 ? 1 : 0);
    start += 1;
  }
  if (start === 0) return { ...result, truncated: true };
  if (start === messages.length && messages.length > 0) {
    // Even the newest message alone is over the cap: a clipped copy says how big it is, rather
    // than an empty page; paging back from it steps past it.
    const newest = messages[messages.length - 1]!;
    const clipped = clipMessage(newest, maxBytes - envelope);
    return { ...result, messages: clipped ? [clipped] : [], truncated: true, nextBefore: newest.seq };
  }
  const kept = messages.slice(start);
  // Paging back from the oldest kept message reaches the dropped ones.
  const nextBefore = kept[0]?.seq ?? messages[messages.length - 1]!.seq;
  return { ...result, messages: kept, truncated: true, nextBefore };
}
