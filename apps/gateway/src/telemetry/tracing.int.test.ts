import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import {
  type AssignedRun,
  connect,
  type RunHandler,
  runTraceContext,
  type SwitchboardClient,
  serve,
} from "@switchboard/client";
import { Events } from "@switchboard/core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  startTelemetryGateway,
  type TelemetryGateway,
  telemetryConfig,
  WORKER_TOKEN,
} from "./telemetry-test-gateway";
import { tracesWanted } from "./tracing";

const TARGET = "agent:research:webchat:dm:bob";

const BLOCK_LIST = {
  policy: {
    rules: [
      {
        id: "no-listing",
        hook: "PRE_TOOL_CALL" as const,
        when: { "tool.name": "sessions_list" },
        action: "deny" as const,
        message: "listing is off",
      },
    ],
  },
};

// The worker's side, as a user of the SDK sets it up: a global provider with its own exporter.
const workerSpans = new InMemorySpanExporter();
const workerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(workerSpans)] });
beforeAll(() => {
  trace.setGlobalTracerProvider(workerProvider);
});
afterAll(async () => {
  trace.disable();
  await workerProvider.shutdown();
});

let gw: TelemetryGateway | undefined;
const clients: SwitchboardClient[] = [];
const workers: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await gw?.close();
  gw = undefined;
  workerSpans.reset();
});

async function start(handler: RunHandler, exporter: InMemorySpanExporter | undefined, extra = {}) {
  gw = await startTelemetryGateway(telemetryConfig(extra), {
    tracing: { env: {}, ...(exporter ? { exporter } : {}) },
  });
  workers.push(await serve({ url: gw.url, token: WORKER_TOKEN }, ["main", "research"], handler));
  const op = await connect({ url: gw.url, token: gw.gateway.operatorToken, role: "operator" });
  clients.push(op);
  return op;
}

const attr = (span: ReadableSpan, name: string) => span.attributes[name];
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const idOf = (span: ReadableSpan) => span.spanContext().spanId;

function runSpan(spans: ReadableSpan[], runId: string): ReadableSpan {
  const span = spans.find((s) => s.name.startsWith("run ") && attr(s, "switchboard.run_id") === runId);
  expect(span, `a span for run ${runId}`).toBeDefined();
  return span!;
}

/** Steps of the agent-to-agent protocol: one reply-back turn, then quiet; announces skipped. */
function stepReply(run: AssignedRun): { reply: string } | undefined {
  if (run.input.context.includes("Agent-to-agent reply step"))
    return { reply: run.input.message.startsWith("one more") ? "REPLY_SKIP" : "one more thing" };
  if (run.input.context.includes("announce step")) return { reply: "ANNOUNCE_SKIP" };
  return undefined;
}

describe("traces", () => {
  it("follows chat.send → run → sessions_send → the target's run → reply-back → announce in one trace", async () => {
    const spans = new InMemorySpanExporter();
    const tracer = trace.getTracer("test-worker");
    const op = await start(
      async (run, ctx) => {
        const step = stepReply(run);
        if (step) return step;
        if (run.agentId === "main") {
          // The worker's own span (a model call) joins the run's trace through the active context.
          await tracer.startActiveSpan("model call", async (span) => {
            span.end();
          });
          const sent = await ctx.invokeTool("sessions_send", {
            sessionKey: TARGET,
            message: "what is the tide?",
            timeoutSeconds: 5,
          });
          const listed = await ctx.invokeTool("sessions_list", {});
          return { reply: `${sent.status}:${(sent as { reply?: string }).reply}/${listed.status}` };
        }
        return { reply: "high at noon" };
      },
      spans,
      BLOCK_LIST,
    );
    // A chat session of the target: it has a route, so the send ends with an announce run.
    await op.sessions.create({ key: TARGET });
    const { runId } = await op.chat.send({ sessionKey: "main", message: "ask research" });
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "ok:high at noon/forbidden",
    });
    await gw!.gateway.flows.idle();

    const all = spans.getFinishedSpans();
    const send = all.find((span) => span.name === "chat.send");
    expect(send).toBeDefined();
    expect(send!.parentSpanContext).toBeUndefined();
    const traceId = send!.spanContext().traceId;
    const inTrace = all.filter((span) => span.spanContext().traceId === traceId);

    const mainRun = runSpan(inTrace, runId);
    expect(parentOf(mainRun)).toBe(idOf(send!));
    expect(attr(mainRun, "switchboard.run_status")).toBe("ok");

    // The worker's tools.invoke is a child of the run, the tool call a child of that request.
    const toolSpan = inTrace.find((span) => span.name === "tool sessions_send")!;
    expect(toolSpan).toBeDefined();
    const invoke = inTrace.find((span) => idOf(span) === parentOf(toolSpan))!;
    expect(invoke.name).toBe("tools.invoke");
    expect(parentOf(invoke)).toBe(idOf(mainRun));

    // The target's run, then the reply-back turns and the announce, all in this trace.
    const origins = (origin: string) =>
      inTrace.filter((span) => span.name.startsWith("run ") && attr(span, "switchboard.origin") === origin);
    const targetRun = origins("send");
    expect(targetRun).toHaveLength(1);
    expect(attr(targetRun[0]!, "switchboard.session_key")).toBe(TARGET);
    expect(parentOf(targetRun[0]!)).toBe(idOf(toolSpan));
    expect(origins("reply").length).toBeGreaterThanOrEqual(2);
    expect(origins("announce")).toHaveLength(1);

    // The worker's model-call span is a child of the run's span in the gateway.
    const model = workerSpans.getFinishedSpans().find((span) => span.name === "model call");
    expect(model).toBeDefined();
    expect(model!.spanContext().traceId).toBe(traceId);
    expect(parentOf(model!)).toBe(idOf(mainRun));

    // The policy block is an event on the refused call's span, naming the rule.
    const listSpan = inTrace.find((span) => span.name === "tool sessions_list")!;
    const blocked = listSpan.events.find((event) => event.name === "policy.decision");
    expect(blocked?.attributes).toMatchObject({
      "switchboard.policy.hook": "PRE_TOOL_CALL",
      "switchboard.policy.action": "BLOCK",
      "switchboard.policy.rule_id": "no-listing",
    });
    // The allowed send's own decisions are events too.
    expect(toolSpan.events.some((event) => event.attributes?.["switchboard.policy.action"] === "ALLOW")).toBe(
      true,
    );
  });

  it("follows sessions_spawn → the child's run → announce in the same trace", async () => {
    const spans = new InMemorySpanExporter();
    const op = await start(async (run, ctx) => {
      const step = stepReply(run);
      if (step) return step;
      if (run.agentId === "main" && run.input.provenance.kind === "user") {
        const spawned = await ctx.invokeTool("sessions_spawn", { task: "dig", agentId: "research" });
        return { reply: spawned.status };
      }
      return { reply: "found it" };
    }, spans);
    const { runId } = await op.chat.send({ sessionKey: "main", message: "delegate" });
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "accepted",
    });
    await gw!.gateway.flows.idle();
    await expect
      .poll(() => spans.getFinishedSpans().some((s) => attr(s, "switchboard.origin") === "spawn-announce"))
      .toBe(true);

    const all = spans.getFinishedSpans();
    const traceId = runSpan(all, runId).spanContext().traceId;
    const inTrace = all.filter((span) => span.spanContext().traceId === traceId);
    const spawnTool = inTrace.find((span) => span.name === "tool sessions_spawn")!;
    expect(spawnTool).toBeDefined();
    const child = inTrace.find((span) => attr(span, "switchboard.origin") === "spawn")!;
    expect(child).toBeDefined();
    expect(parentOf(child)).toBe(idOf(spawnTool));
    expect(String(attr(child, "switchboard.session_key"))).toMatch(/^agent:research:subagent:/);
    const announce = inTrace.find((span) => attr(span, "switchboard.origin") === "spawn-announce")!;
    expect(announce).toBeDefined();
    expect(attr(announce, "switchboard.session_key")).toBe("agent:main:main");
  });

  it("sends no traceparent and records no span with traces off", async () => {
    const seen: Array<{ run: AssignedRun; traced: boolean }> = [];
    const op = await start(async (run, ctx) => {
      seen.push({ run, traced: ctx.traceContext !== undefined });
      return { reply: "plain" };
    }, undefined);
    expect(gw!.gateway.telemetry.tracing).toBeUndefined();
    const { runId } = await op.chat.send({ sessionKey: "main", message: "hi" });
    await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.run).not.toHaveProperty("traceparent");
    expect(seen[0]!.traced).toBe(false);
  });

  // Before session 23 the runs an instance let go when the cluster declared it lost kept their spans
  // open in memory until shutdown (their end belongs to another instance).
  it("ends the span of a run the instance lets go of (declared lost)", async () => {
    const spans = new InMemorySpanExporter();
    let held!: () => void;
    const holding = new Promise<void>((resolve) => {
      held = resolve;
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const op = await start(async () => {
      held();
      await released;
      return { reply: "late" };
    }, spans);
    const { runId } = await op.chat.send({ sessionKey: "main", message: "hold on" });
    await holding;
    try {
      expect(spans.getFinishedSpans().some((span) => attr(span, "switchboard.run_id") === runId)).toBe(false);
      expect(gw!.gateway.scheduler.abandonHeld()).toBe(1);
      const ended = spans
        .getFinishedSpans()
        .find((span) => span.name.startsWith("run ") && attr(span, "switchboard.run_id") === runId);
      expect(ended, "the let-go run's span, ended").toBeDefined();
    } finally {
      release();
    }
  });
});

describe("trace context on the wire", () => {
  it("run.assigned accepts only a W3C traceparent, and the SDK reads it as a remote parent", () => {
    const base = {
      runId: "r",
      sessionKey: "agent:main:main",
      agentId: "main",
      lane: "main",
      input: { message: "m", provenance: { kind: "user" }, context: "" },
      history: [],
      tools: [],
    };
    const good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    expect(Events["run.assigned"].safeParse({ ...base, traceparent: good }).success).toBe(true);
    const bad = Events["run.assigned"].safeParse({
      ...base,
      traceparent: "0af7651916cd43dd8448eb211c80319c",
    });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.message).toContain("W3C traceparent");

    const parent = trace.getSpanContext(runTraceContext({ traceparent: good })!);
    expect(parent).toEqual({
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      traceFlags: 1,
      isRemote: true,
    });
    expect(runTraceContext({})).toBeUndefined();
    expect(runTraceContext({ traceparent: `00-${"0".repeat(32)}-b7ad6b7169203331-01` })).toBeUndefined();
  });

  it("turns traces on from the config or the standard OTEL_* variables, and off by default", () => {
    const config = (traces?: object) =>
      ({ telemetry: { metrics: { enabled: true, public: false }, ...(traces ? { traces } : {}) } }) as never;
    expect(tracesWanted(config(), {})).toBe(false);
    expect(tracesWanted(config({ exporter: "otlp" }), {})).toBe(true);
    expect(tracesWanted(config(), { OTEL_TRACES_EXPORTER: "otlp" })).toBe(true);
    expect(tracesWanted(config(), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" })).toBe(true);
    expect(tracesWanted(config({ exporter: "otlp" }), { OTEL_SDK_DISABLED: "true" })).toBe(false);
    expect(tracesWanted(config({ exporter: "otlp" }), { OTEL_TRACES_EXPORTER: "none" })).toBe(false);
  });
});

describe("OTLP export", () => {
  it("posts the spans to telemetry.traces.endpoint over OTLP/HTTP, flushed when the gateway closes", async () => {
    const received: Array<{ path: string; type: string; bytes: number }> = [];
    const collector = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        received.push({
          path: req.url ?? "",
          type: String(req.headers["content-type"]),
          bytes: Buffer.concat(chunks).length,
        });
        res.writeHead(200, { "content-type": "application/json" });
        res.end("{}");
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve));
    const { port } = collector.address() as AddressInfo;
    try {
      gw = await startTelemetryGateway(
        telemetryConfig({
          telemetry: { traces: { exporter: "otlp", endpoint: `http://127.0.0.1:${port}/` } },
        }),
        { tracing: { env: {} } },
      );
      expect(gw.gateway.telemetry.tracing).toBeDefined();
      const op = await connect({ url: gw.url, token: gw.gateway.operatorToken, role: "operator" });
      await op.sessions.list({});
      await op.close();
      await gw.close();
      gw = undefined;
      expect(received.length).toBeGreaterThanOrEqual(1);
      expect(received[0]).toMatchObject({ path: "/v1/traces" });
      expect(received[0]!.type).toMatch(/^application\/(x-protobuf|json)/);
      expect(received[0]!.bytes).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((resolve) => collector.close(() => resolve()));
    }
  });
});
