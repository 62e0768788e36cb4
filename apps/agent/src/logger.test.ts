import { Writable } from "node:stream";
import { type Logger as ClientLogger, ClientOptionsSchema } from "@switchboard/client";
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { AgentLogger } from "./logger";

function capturedPino() {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
      done();
    },
  });
  return { lines, log: pino({ level: "debug" }, stream) };
}

describe("AgentLogger", () => {
  it("is satisfied by pino as it is, and a child keeps bindings and fields", async () => {
    const { lines, log } = capturedPino();
    // No cast: the annotation is the compile-time half of the test.
    const logger: AgentLogger = log;
    logger.child({ component: "agent-worker" }).warn({ runId: "r1" }, "run failed");
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toEqual([
      expect.objectContaining({ component: "agent-worker", runId: "r1", msg: "run failed" }),
    ]);
  });

  it("is the logger the client SDK takes, so one logger serves both", () => {
    const { log } = capturedPino();
    const agentLogger: AgentLogger = log;
    const clientLogger: ClientLogger = agentLogger;
    const parsed = ClientOptionsSchema.parse({
      url: "ws://127.0.0.1:1",
      token: "t",
      role: "operator",
      logger: clientLogger,
    });
    expect(parsed.logger).toBe(log);
  });
});
