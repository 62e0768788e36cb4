import { describe, expect, it } from "vitest";
import {
  ConnectParamsSchema,
  EVENT_NAMES,
  METHOD_NAMES,
  METHOD_ROLES,
  Methods,
  methodsForRole,
  protocolJsonSchema,
} from "./index";

describe("protocol schemas", () => {
  it("gives every method a role list and every role a non-empty method set", () => {
    for (const name of METHOD_NAMES) expect(METHOD_ROLES[name].length).toBeGreaterThan(0);
    expect(methodsForRole("operator")).toHaveLength(METHOD_NAMES.length - 3);
    expect(methodsForRole("client")).toEqual(
      expect.arrayContaining([
        "chat.send",
        "sessions.history",
        "sessions.status",
        "agent.wait",
        "events.subscribe",
      ]),
    );
    expect(methodsForRole("client")).not.toContain("sessions.list");
    expect(methodsForRole("agent")).toEqual(
      expect.arrayContaining(["tools.invoke", "tools.list", "run.complete", "run.fail", "run.progress"]),
    );
  });

  it("requires exactly one selector in sessions.resolve", () => {
    const schema = Methods["sessions.resolve"].params;
    expect(schema.safeParse({ key: "main" }).success).toBe(true);
    const both = schema.safeParse({ key: "main", label: "x" });
    expect(both.success).toBe(false);
    expect(both.error?.issues[0]?.message).toContain("exactly one of key, sessionId, label");
    expect(schema.safeParse({}).success).toBe(false);
  });

  it("rejects an empty chat message naming the field", () => {
    const result = Methods["chat.send"].params.safeParse({ sessionKey: "main", message: "" });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["message"]);
    // Blank too (session 23: "   " made a run the tools would have refused).
    const blank = Methods.agent.params.safeParse({ sessionKey: "main", message: " \n\t " });
    expect(blank.error?.issues[0]).toMatchObject({ path: ["message"], message: "must not be blank" });
    expect(Methods["chat.send"].params.safeParse({ sessionKey: "main", message: " hi " }).success).toBe(true);
  });

  it("refuses an idempotency key in the gateway's own namespace, naming the field and the rule", () => {
    for (const method of ["chat.send", "agent"] as const) {
      const reserved = Methods[method].params.safeParse({
        sessionKey: "main",
        message: "hi",
        idempotencyKey: "a2a:0b9c…:turn:1",
      });
      expect(reserved.success).toBe(false);
      expect(reserved.error?.issues[0]?.path).toEqual(["idempotencyKey"]);
      expect(reserved.error?.issues[0]?.message).toMatch(/^must not start with a2a: or announce:/);
      const own = Methods[method].params.safeParse({
        sessionKey: "main",
        message: "hi",
        idempotencyKey: "mine:a2a:1",
      });
      expect(own.success).toBe(true);
    }
  });

  it("takes an optional worker concurrency in connect: a whole number from 1 to 1024", () => {
    const base = { protocol: 1, client: { name: "w", version: "1" }, auth: { token: "t" }, role: "agent" };
    expect(ConnectParamsSchema.safeParse(base).data?.concurrency).toBeUndefined();
    expect(ConnectParamsSchema.safeParse({ ...base, concurrency: 8 }).data?.concurrency).toBe(8);
    for (const concurrency of [0, 1.5, 1025, "4"]) {
      const result = ConnectParamsSchema.safeParse({ ...base, concurrency });
      expect(result.success, String(concurrency)).toBe(false);
      expect(result.error?.issues[0]?.path).toEqual(["concurrency"]);
      expect(result.error?.issues[0]?.message).toBe("must be a whole number from 1 to 1024");
    }
  });

  it("exports the whole protocol as JSON Schema", () => {
    const schema = protocolJsonSchema() as {
      methods: Record<string, unknown>;
      events: Record<string, unknown>;
    };
    expect(Object.keys(schema.methods).sort()).toEqual([...METHOD_NAMES].sort());
    expect(Object.keys(schema.events).sort()).toEqual([...EVENT_NAMES].sort());
  });
});

describe("run.complete reply", () => {
  const parse = (reply: string) => Methods["run.complete"].params.safeParse({ runId: "r1", reply });
  it("takes a reply that fits one stored message", () => {
    expect(parse("x".repeat(1024 * 1024)).success).toBe(true);
  });
  it("refuses one past the store's message limit, naming reply and the limit once", () => {
    for (const reply of ["x".repeat(1024 * 1024 + 1), "é".repeat(600_000), '"'.repeat(600_000)]) {
      const result = parse(reply);
      expect(result.success).toBe(false);
      expect(result.error!.issues.map((issue) => [issue.path.join("."), issue.message])).toEqual([
        ["reply", "must be at most 1048576 bytes of UTF-8, counted JSON-encoded as it is stored"],
      ]);
    }
  });
});
