import { describe, expect, it } from "vitest";
import { createAuditChain, verifyAuditRecords } from "../audit/audit-chain";
import type { AuditRecord } from "../audit/audit-schema";
import { parseConfig } from "../config/parse-config";
import { createPolicyEngine } from "./engine";
import { validatePolicyRules } from "./rule-schema";
import { resolveSendPolicy } from "./send-policy";
import { sendContext } from "./test-fixtures";

const TELEGRAM_DM = "agent:main:telegram:dm:42";

describe("rule conditions", () => {
  it("rejects a `when` field named __proto__ instead of dropping it (the rule would match everything)", () => {
    // JSON (and JSON5/YAML) config gives an own "__proto__" key; zod's record turns it into a prototype.
    const rules = JSON.parse(
      '[{"id":"allow-trusted","hook":"PRE_TOOL_CALL","priority":10,"action":"allow","when":{"__proto__":{"in":["x"]}}},' +
        '{"id":"deny-all-tools","hook":"PRE_TOOL_CALL","action":"deny"}]',
    );
    expect(() => validatePolicyRules(rules)).toThrow(/__proto__|unknown field/);
  });

  it("rejects a level field compared with a lower-case level (equality) at load", () => {
    // Levels parse exactly (upper case); this deny rule could never match and leaks silently.
    expect(() =>
      validatePolicyRules([
        { id: "no-conf-out", hook: "PRE_OUTPUT", action: "deny", when: { "caller.taint": "confidential" } },
      ]),
    ).toThrow(/PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED/);
  });

  it("rejects a level field with a number comparison (gte: 2) at load", () => {
    expect(() =>
      validatePolicyRules([
        { id: "no-high-out", hook: "PRE_OUTPUT", action: "deny", when: { "caller.taint": { gte: 2 } } },
      ]),
    ).toThrow(/caller\.taint/);
  });
});

describe("redaction", () => {
  it("refuses lookaround (RE2 syntax) and does not report a zero-width match as a redaction", () => {
    expect(() =>
      validatePolicyRules([
        { id: "no-keys", hook: "PRE_SEND", action: "redact", redact: { patterns: ["\\b(?=sk-)"] } },
      ]),
    ).toThrow(/redact\.patterns\[0\]: invalid regular expression \(RE2 syntax/);
    const engine = createPolicyEngine({
      rules: [{ id: "no-keys", hook: "PRE_SEND", action: "redact", redact: { patterns: ["\\bkey\\b|\\b"] } }],
    });
    const decision = engine.evaluate(
      sendContext({}, { key: TELEGRAM_DM }, { text: "key: sk-ABCDEFGHIJKLMNOPQRSTUVWX" }),
    );
    // Only the real match counts; the empty ones (`\b` between words) rewrite nothing. Before, each
    // empty match was a "redaction" with the replacement spliced in beside the secret.
    expect(decision.redactions).toBe(1);
    expect(decision.text).toBe("[REDACTED]: sk-ABCDEFGHIJKLMNOPQRSTUVWX");
  });

  it("matches a catastrophically backtracking pattern in linear time (RE2), not freezing the loop", () => {
    const engine = createPolicyEngine({
      rules: [{ id: "as-only", hook: "PRE_SEND", action: "deny", when: { text: { matches: "^(a+)+$" } } }],
    });
    // Forty characters kept a backtracking engine busy for hours; RE2 answers at once.
    const decision = engine.evaluate(
      sendContext({}, { key: TELEGRAM_DM }, { text: `${"a".repeat(10_000)}!` }),
    );
    expect(decision.action).not.toBe("BLOCK");
    expect(engine.evaluate(sendContext({}, { key: TELEGRAM_DM }, { text: "aaaa" })).action).toBe("BLOCK");
  });
});

describe("counted repeats", () => {
  // Before session 23 `\\w{1000}\\d` loaded, and one 500 kB message froze the event loop for 9 s
  // in a single synchronous match (RE2 is linear in the text, at a cost per character about the count).
  it("refuses a count over 100, also one multiplied by a group's inner counts, naming the rule; keeps the usual ones", () => {
    const rule = (pattern: string) => [
      { id: "blobs", hook: "PRE_SEND" as const, action: "redact" as const, redact: { patterns: [pattern] } },
    ];
    expect(() => validatePolicyRules(rule("\\w{1000}\\d"))).toThrow(
      /rule "blobs".*redact\.patterns\[0\]: repeat \{1000\} is over 100/,
    );
    expect(() => validatePolicyRules(rule("[a-z]{2,300}"))).toThrow(/repeat \{2,300\} is over 100/);
    expect(() => validatePolicyRules(rule("(?:[0-9a-f]{32}-){10}"))).toThrow(
      /group holding repeats counts 320/,
    );
    expect(() =>
      validatePolicyRules([
        { id: "m", hook: "PRE_SEND", action: "deny", when: { text: { matches: "x{101}" } } },
      ]),
    ).toThrow(/repeat \{101\} is over 100/);
    // Braces that are not a repeat: escaped, in a class, or literal text.
    for (const fine of [
      "sk-[A-Za-z0-9]{20,}",
      "[A-Za-z0-9+/]{100,}={0,2}",
      "\\{1000\\}",
      "[{]1000[}]",
      "\\d{4}(?:[ -]?\\d{4}){3}",
      "(ab)*{",
    ])
      expect(() => validatePolicyRules(rule(fine)), fine).not.toThrow();
  });
});

describe("send policy", () => {
  it("a whitespace-only match value is not a wildcard (deny channel ' ' blocks nothing on telegram)", () => {
    expect(
      resolveSendPolicy({ rules: [{ action: "deny", match: { channel: " " } }] }, { key: TELEGRAM_DM }),
    ).toMatchObject({ action: "allow" });
  });

  it("rejects a whitespace-only send-policy match value at config load", () => {
    expect(() =>
      parseConfig({ session: { sendPolicy: { rules: [{ action: "deny", match: { keyPrefix: "  " } }] } } }),
    ).toThrow(/session\.sendPolicy\.rules\[0\]\.match\.keyPrefix/);
  });
});

describe("audit verify", () => {
  const key = new Uint8Array(32).fill(7);

  async function chainOf(count: number): Promise<AuditRecord[]> {
    const chain = createAuditChain({ key });
    const records: AuditRecord[] = [];
    for (let n = 0; n < count; n++)
      records.push(
        await chain.next({
          kind: "policy.blocked",
          at: 1_700_000_000_000 + n,
          actor: "agent:main:main",
          data: { ruleId: "flow.no-write-down", n },
        }),
      );
    return records;
  }

  it("detects a record whose data gained a __proto__ key (as stored on disk, one JSON line each)", async () => {
    const lines = (await chainOf(3)).map((record) => JSON.stringify(record));
    lines[1] = lines[1]!.replace('"n":1', '"n":1,"__proto__":{"ruleId":"forged","approvedBy":"ops"}');
    const tampered = lines.map((line) => JSON.parse(line) as unknown);
    // The stored record really changed.
    expect(Object.hasOwn((tampered[1] as { data: object }).data, "__proto__")).toBe(true);
    const result = await verifyAuditRecords(key, tampered);
    expect(result).toMatchObject({ ok: false, firstBadIndex: 1 });
  });
});
