import type { BlockedCall } from "./live";

/** What the probe reads of the audit log: an `audit.tail` entry, as the gateway sends it. */
export type AuditEntryLike = Record<string, unknown>;
export type AuditTail = (params: {
  limit?: number;
  after?: number;
}) => Promise<{ entries: AuditEntryLike[] }>;

const PAGE = 500;
/** `audit.tail` calls at most: a busy hour then shows its newest blocked calls only, not a stalled page. */
const MAX_CALLS = 6;

/** Where an entry sits for `after`: the cluster-wide `position` in a cluster, else the chain's `index`. */
function cursorOf(entry: AuditEntryLike | undefined): number | undefined {
  if (typeof entry?.position === "number") return entry.position;
  return typeof entry?.index === "number" ? entry.index : undefined;
}

/**
 * The audit log's entries back to `since` (oldest first), in a few calls: a single tail of 500 lost
 * the hour's blocked calls behind any 500 newer entries. `audit.tail` only reads forward from `after`,
 * so each step back starts as far before the oldest entry read as the last page spanned (positions
 * in a cluster are not dense), and reads forward up to it.
 */
export async function hourOfAudit(tail: AuditTail, since: number): Promise<AuditEntryLike[]> {
  let calls = 1;
  let page = (await tail({ limit: PAGE })).entries;
  const pages = [page];
  // Fewer than asked for: that was the whole log.
  let atStart = page.length < PAGE;
  while (!atStart && calls < MAX_CALLS) {
    const from = cursorOf(page[0]);
    const to = cursorOf(page.at(-1));
    const oldestAt = page[0]?.at;
    if (from === undefined || to === undefined || typeof oldestAt !== "number" || oldestAt < since) break;
    const step = Math.ceil(((to - from + 1) * PAGE) / page.length);
    let after = Math.max(-1, from - 1 - step);
    atStart = after === -1;
    const older: AuditEntryLike[] = [];
    while (calls < MAX_CALLS) {
      calls += 1;
      const got = (await tail({ limit: PAGE, after })).entries;
      const below = got.filter((entry) => (cursorOf(entry) ?? from) < from);
      older.push(...below);
      const last = cursorOf(got.at(-1));
      if (below.length < got.length || got.length < PAGE || last === undefined || last >= from - 1) break;
      after = last;
    }
    if (older.length === 0) break;
    page = older;
    pages.unshift(older);
  }
  return pages.flat();
}

/** A `policy.blocked` audit entry from `since` on, as the overview lists it. */
export function blockedCall(entry: AuditEntryLike, since: number): BlockedCall | undefined {
  if (entry.kind !== "policy.blocked" || typeof entry.at !== "number" || entry.at < since) return undefined;
  const data = (entry.data ?? {}) as Record<string, unknown>;
  return {
    at: entry.at,
    hook: String(data.hook ?? ""),
    ruleId: typeof data.ruleId === "string" ? data.ruleId : null,
    message: String(data.message ?? ""),
    sessionKey: typeof entry.sessionKey === "string" ? entry.sessionKey : undefined,
    target: typeof data.target === "string" ? data.target : undefined,
  };
}
