import type { TestPeer } from "../testing/test-peer";

/** A small seeded PRNG (mulberry32): the reliability tests replay exactly from their seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

export interface WireMessage {
  seq: number;
  id: string;
  role: string;
  label: string;
  content: Array<{ type?: string; text?: string }>;
  provenance?: Record<string, unknown>;
}

/** Every message of a session, oldest first, paging backwards with the `before` cursor. */
export async function readWholeHistory(peer: TestPeer, sessionKey: string): Promise<WireMessage[]> {
  const pages: WireMessage[][] = [];
  let before: number | undefined;
  for (;;) {
    const page = await peer.call<{ messages: WireMessage[]; nextBefore?: number }>("sessions.history", {
      sessionKey,
      limit: 500,
      includeTools: true,
      ...(before !== undefined ? { before } : {}),
    });
    pages.unshift(page.messages);
    if (page.nextBefore === undefined || page.messages.length === 0) break;
    before = page.nextBefore;
  }
  return pages.flat();
}

export function textOf(message: Pick<WireMessage, "content">): string {
  return message.content.map((part) => part.text ?? "").join("");
}

/** Every audit record, oldest first (paging forwards with `after`). */
export async function readWholeAudit(
  peer: TestPeer,
): Promise<Array<Record<string, unknown> & { index: number; kind: string }>> {
  const all: Array<Record<string, unknown> & { index: number; kind: string }> = [];
  let after = -1;
  for (;;) {
    const { entries } = await peer.call<{
      entries: Array<Record<string, unknown> & { index: number; kind: string }>;
    }>("audit.tail", {
      limit: 1000,
      after,
    });
    all.push(...entries);
    if (entries.length < 1000) return all;
    after = entries[entries.length - 1]!.index;
  }
}
