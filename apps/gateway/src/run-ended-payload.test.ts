import type { RunRecord } from "@switchboard/core";
import { Events } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { runEndedPayload, toWaitResult, waitResultOfEnded } from "./run-scheduler";

const ended: RunRecord = {
  runId: "r1",
  sessionKey: "agent:main:main",
  sessionId: "s1",
  agentId: "main",
  lane: "nested",
  status: "ok",
  createdAt: 1,
  startedAt: 2,
  endedAt: 3,
  origin: "send",
  message: "Q3?",
  reply: "-38%",
  endLabel: "CONFIDENTIAL",
  attempts: 0,
};

// Another instance's waiter learns a run's end from its record or from the `run.ended` event: either
// way the reply keeps the label it was written at, so a reset before the take-in cannot lower it.
describe("the label a run's end gives its reply", () => {
  it("reaches a waiter through the record and through the run.ended event", () => {
    expect(toWaitResult(ended)).toMatchObject({ reply: "-38%", label: "CONFIDENTIAL" });
    const payload = Events["run.ended"].parse(runEndedPayload(ended, "ok"));
    expect(waitResultOfEnded(payload)).toMatchObject({ status: "ok", reply: "-38%", label: "CONFIDENTIAL" });
  });

  it("is absent when the run's end was the gateway's own", () => {
    const { endLabel: _, ...lost } = ended;
    expect(toWaitResult({ ...lost, status: "error", error: "lost" }).label).toBeUndefined();
  });
});
