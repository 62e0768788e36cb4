import { MAX_INPUT_MESSAGE_BYTES } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";

/** Issue 10, item 9: a message over the history page cap is never silently unreadable. */
const WORKER = "worker-token-0123456789";
let gw: TestGateway;
let worker: TestWorker | undefined;

afterEach(async () => {
  worker?.close();
  await gw?.close();
});

type Page = {
  messages: Array<{
    seq: number;
    role: string;
    content: Array<{ text?: string }>;
    clipped?: { bytes: number };
  }>;
  truncated: boolean;
  nextBefore?: number;
};

describe("large messages", () => {
  it("reads a 200 kB message back: clipped with its full size by default, whole with maxBytes", async () => {
    gw = await startTestGateway(
      { auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] } },
      { store: "file" },
    );
    const op = await gw.operator();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
    const big = `start ${"é".repeat(100_000)} end`;
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: big });
    expect(await op.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    expect(worker.runs[0]!.input.message).toBe(big);

    const page = await op.call<Page>("sessions.history", { sessionKey: "main", limit: 1 });
    expect(page.truncated).toBe(true);
    expect(page.messages).toHaveLength(1);
    const newest = page.messages[0]!;
    expect(newest.role).toBe("assistant");
    expect(newest.clipped?.bytes).toBeGreaterThan(200_000);
    expect(big.includes(newest.content[0]!.text!.slice("echo: ".length))).toBe(true);

    const whole = await op.call<Page>("sessions.history", {
      sessionKey: "main",
      limit: 2,
      maxBytes: 1024 * 1024,
    });
    expect(whole.truncated).toBe(false);
    expect(whole.messages.map((m) => m.content[0]!.text)).toEqual([big, `echo: ${big}`]);

    // The agent-facing tool: the same clipped copy, never an empty page.
    const tool = await op.call<Page & { status: string }>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: "main", limit: 1 },
      as: "main",
    });
    expect(tool.status).toBe("ok");
    expect(tool.messages[0]?.clipped?.bytes).toBeGreaterThan(200_000);
  });

  it("refuses a message over the documented limit at input, naming the field and the limit", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const op = await gw.operator();
    const response = await op.request("chat.send", {
      sessionKey: "main",
      message: "x".repeat(MAX_INPUT_MESSAGE_BYTES + 1),
    });
    expect(response.error?.code).toBe("INVALID_REQUEST");
    expect(response.error?.message).toContain("message");
    expect(response.error?.message).toContain(`${MAX_INPUT_MESSAGE_BYTES} bytes`);
    const multibyte = await op.request("chat.send", {
      sessionKey: "main",
      message: "é".repeat(MAX_INPUT_MESSAGE_BYTES / 2 + 1),
    });
    expect(multibyte.error?.code).toBe("INVALID_REQUEST");
    const listed = await op.call<{ sessions: unknown[] }>("sessions.list", { limit: 5 });
    expect(listed.sessions).toHaveLength(0);
  });
});
