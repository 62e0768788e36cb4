import { LEVELS as CORE_LEVELS } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import {
  auditMatches,
  auditRow,
  type HistoryMessage,
  LEVELS,
  mergeMessages,
  parseArgs,
  provenanceText,
  relativeTime,
  tokenFromFragment,
  transcriptItems,
} from "./format";

function entry(seq: number, role: string, content: HistoryMessage["content"]): HistoryMessage {
  return { seq, id: `e${seq}`, ts: 1000 * seq, role, content, label: "PUBLIC" };
}

describe("transcript items", () => {
  it("pairs parallel tool calls with their own results, in the place of the call", () => {
    const items = transcriptItems([
      entry(1, "user", [{ type: "text", text: "look both up" }]),
      entry(2, "toolCall", [
        { type: "toolCall", id: "a", name: "sessions_list", args: { limit: 1 } },
        { type: "toolCall", id: "b", name: "session_status", args: {} },
      ]),
      // Results arrive in the other order.
      entry(3, "toolResult", [
        { type: "toolResult", toolCallId: "b", name: "session_status", result: { status: "ok" } },
      ]),
      entry(4, "toolResult", [
        { type: "toolResult", toolCallId: "a", name: "sessions_list", result: { status: "forbidden" } },
      ]),
      entry(5, "assistant", [{ type: "text", text: "done" }]),
    ]);
    expect(
      items.map((item) => (item.type === "tool" ? `tool:${item.id}` : `msg:${item.message.seq}`)),
    ).toEqual(["msg:1", "tool:a", "tool:b", "msg:5"]);
    const [_, a, b] = items;
    expect(a?.type === "tool" && a.result?.value).toEqual({ status: "forbidden" });
    expect(b?.type === "tool" && b.result?.value).toEqual({ status: "ok" });
  });

  it("shows a result whose call is on an older page as a call of unknown arguments", () => {
    const items = transcriptItems([
      entry(9, "toolResult", [
        { type: "toolResult", toolCallId: "x", name: "sessions_send", result: { status: "ok" } },
      ]),
    ]);
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ type: "tool", id: "x", name: "sessions_send", args: undefined });
  });

  it("keeps markup in message text as text", () => {
    const items = transcriptItems([
      entry(1, "user", [{ type: "text", text: "<img src=x onerror=alert(1)>" }]),
    ]);
    expect(items[0]).toMatchObject({ type: "message", text: "<img src=x onerror=alert(1)>" });
  });
});

describe("helpers", () => {
  it("merges pages by seq without duplicates, oldest first", () => {
    const merged = mergeMessages(
      [entry(3, "user", []), entry(4, "user", [])],
      [entry(1, "user", []), entry(3, "user", [])],
    );
    expect(merged.map((m) => m.seq)).toEqual([1, 3, 4]);
  });

  it("says where an entry came from", () => {
    expect(provenanceText({ kind: "user", channel: "discord" })).toBe("user on discord");
    expect(
      provenanceText({
        kind: "agent",
        fromSessionKey: "agent:research:main",
        fromRunId: "r",
        chainId: "c",
        hop: 1,
      }),
    ).toBe("from agent:research:main (hop 1)");
    expect(provenanceText({ kind: "subagent", childSessionKey: "agent:main:subagent:1", runId: "r" })).toBe(
      "report of sub-agent agent:main:subagent:1",
    );
    expect(provenanceText(undefined)).toBeUndefined();
  });

  it("reads the token from the fragment only", () => {
    expect(tokenFromFragment("#token=abc%2Bdef")).toBe("abc+def");
    expect(tokenFromFragment("#other=1")).toBeUndefined();
    expect(tokenFromFragment("")).toBeUndefined();
  });

  it("formats relative times", () => {
    expect(relativeTime(0, 12_000)).toBe("12 s ago");
    expect(relativeTime(0, 3 * 60_000)).toBe("3 min ago");
    expect(relativeTime(0, 5 * 3_600_000)).toBe("5 h ago");
    expect(relativeTime(0, 3 * 86_400_000)).toBe("3 d ago");
  });

  it("refuses simulator arguments that are not a JSON object, naming the field", () => {
    expect(parseArgs('{"sessionKey":"main"}')).toEqual({ ok: true, value: { sessionKey: "main" } });
    expect(parseArgs("[1]")).toMatchObject({
      ok: false,
      error: expect.stringMatching(/^Arguments: must be a JSON object/),
    });
    expect(parseArgs("{nope")).toMatchObject({
      ok: false,
      error: expect.stringMatching(/^Arguments: not valid JSON/),
    });
  });

  it("turns a blocked audit record into a row and filters it", () => {
    const row = auditRow({
      index: 7,
      at: 5,
      kind: "policy.blocked",
      actor: "agent:main",
      sessionKey: "agent:main:webchat:dm:carol",
      data: {
        hook: "PRE_SEND",
        ruleId: "no-write-down",
        message: "write-down blocked",
        target: "agent:research:discord:group:lab",
      },
    });
    expect(row).toMatchObject({ index: 7, decision: "BLOCK", rule: "no-write-down", hook: "PRE_SEND" });
    expect(auditMatches(row, "write-down lab", "")).toBe(true);
    expect(auditMatches(row, "", "delivery")).toBe(false);
  });

  it("knows the same levels as core", () => {
    expect([...LEVELS]).toEqual([...CORE_LEVELS]);
  });
});
