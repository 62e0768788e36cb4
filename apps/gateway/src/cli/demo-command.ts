import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startAgentWorker } from "@switchboard/agent";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { EVENT_NAMES, type EventName, parseConfig } from "@switchboard/core";
import { Gateway } from "../gateway";
import { VERSION } from "../version";
import { type CommandSpec, JSON_OPTION } from "./args";
import { EXIT, errorMessage } from "./cli-errors";
import type { Command } from "./command";
import {
  type Check,
  demoConfig,
  EventLog,
  playScenario,
  type ScenarioContext,
  type TimelineEntry,
} from "./demo-scenario";
import { checkLines, timelineLines } from "./demo-timeline";
import { printJson, startProgress } from "./output";
import { appLogger, LOG_OPTION } from "./serve";

const spec: CommandSpec = {
  name: "demo",
  brief: "the scripted multi-agent scenario, with its timeline",
  summary:
    "Plays a scripted multi-agent scenario against a real gateway (port 0, temporary data dir, scripted agents main and research) and prints its timeline: a spawned researcher announcing back, a send with a reply-back loop and an announce to a channel, and a write-down that the gateway blocks. Exit 0 when every step happened as expected.",
  positionals: { min: 0, max: 0 },
  options: {
    "keep-data": {
      type: "boolean",
      description: "keep the temporary data dir (its path is printed) instead of deleting it",
    },
    ...LOG_OPTION,
    ...JSON_OPTION,
  },
  details: "Example:\n  switchboard demo",
};

const SHOWN_EVENTS: readonly EventName[] = EVENT_NAMES.filter((name) => name !== "run.assigned");

export const demoCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const config = parseConfig(demoConfig());
    const logger = appLogger(spec, values, config);
    const dataDir = await mkdtemp(join(tmpdir(), "switchboard-demo-"));
    const started = performance.now();
    const entries: TimelineEntry[] = [];
    const checks: Check[] = [];
    const runKinds = new Map<string, string>();
    const log = new EventLog(started);
    let gateway: Gateway | undefined;
    let worker: Awaited<ReturnType<typeof startAgentWorker>> | undefined;
    let client: SwitchboardClient | undefined;
    let failure: string | undefined;
    const progress = startProgress(io, "playing the demo scenario");
    try {
      gateway = await Gateway.start({ config, dataDir, logger, fsync: "none" });
      worker = await startAgentWorker({ url: gateway.url, token: gateway.operatorToken, config, logger });
      client = await connect({
        url: gateway.url,
        token: gateway.operatorToken,
        role: "operator",
        clientName: "switchboard-demo",
        clientVersion: VERSION,
      });
      log.attach(client, SHOWN_EVENTS);
      await client.subscribe({});
      const context: ScenarioContext = {
        client,
        log,
        runKinds,
        checks,
        note: (kind, actor, text) => entries.push({ at: performance.now() - started, kind, actor, text }),
      };
      context.note(
        "operator",
        "gateway",
        `up on ${gateway.url} with scripted agents main and research (data dir ${dataDir})`,
      );
      await playScenario(context);
    } catch (error) {
      failure = errorMessage(error);
    } finally {
      progress.stop();
      await client?.close().catch(() => undefined);
      await worker?.stop().catch(() => undefined);
      await gateway?.close().catch(() => undefined);
      if (!values["keep-data"]) await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
    }

    const timeline = [
      ...entries,
      ...log.events.map(({ at, event }) => ({ at, kind: "event" as const, actor: "", text: "", event })),
    ].sort((a, b) => a.at - b.at);
    const ok = failure === undefined && checks.length > 0 && checks.every((check) => check.ok);
    if (values.json) {
      printJson(io, {
        ok,
        ...(failure ? { error: failure } : {}),
        checks,
        timeline: timeline.map((entry) => ({
          at: Math.round(entry.at),
          kind: entry.kind,
          actor: entry.actor,
          text: entry.text,
          ...(entry.event ? { event: entry.event } : {}),
        })),
        ...(values["keep-data"] ? { dataDir } : {}),
      });
    } else {
      io.out(`Switchboard demo — a real gateway, two scripted agents (main, research), three scenes\n`);
      io.out(timelineLines(timeline, runKinds).join("\n"));
      io.out("\nWhat the demo checked:");
      io.out(
        checkLines(checks)
          .map((line) => `  ${line}`)
          .join("\n"),
      );
      if (failure) io.out(`  ✗ ${failure}`);
      if (values["keep-data"]) io.out(`\ndata dir kept: ${dataDir}`);
      io.out(ok ? "\ndemo passed: every step happened as expected" : "\ndemo FAILED: see the ✗ lines above");
    }
    return ok ? EXIT.ok : EXIT.failure;
  },
};
