import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { startAgentWorker } from "@switchboard/agent";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { EVENT_NAMES, type EventName, parseConfig } from "@switchboard/core";
import type { Gateway } from "../gateway";
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

/** 128 + the signal number, as a shell reports a process a signal ended. */
const SIGNAL_EXIT = { SIGINT: 130, SIGTERM: 143 } as const;
type StopSignal = keyof typeof SIGNAL_EXIT;

interface Interruption {
  /** Rejects on the first SIGINT/SIGTERM. */
  signalled: Promise<never>;
  signal: StopSignal | undefined;
  dispose(): void;
}

/**
 * Turns the first SIGINT/SIGTERM into a rejection, so the demo unwinds through its clean-up. A second
 * signal means "now": `force` runs (synchronously) and the process exits.
 */
function onInterrupt(force: () => void): Interruption {
  let reject: (error: Error) => void = () => undefined;
  const signalled = new Promise<never>((_, fail) => {
    reject = fail;
  });
  signalled.catch(() => undefined);
  const interruption: Interruption = {
    signalled,
    signal: undefined,
    dispose: () => {
      for (const signal of Object.keys(SIGNAL_EXIT)) process.off(signal, handler);
    },
  };
  const handler = (signal: StopSignal) => {
    if (interruption.signal) {
      force();
      process.exit(SIGNAL_EXIT[signal]);
    }
    interruption.signal = signal;
    reject(new Error(`interrupted by ${signal}`));
  };
  for (const signal of Object.keys(SIGNAL_EXIT)) process.on(signal, handler);
  return interruption;
}

function settled<T>(promise: Promise<T> | undefined): Promise<T | undefined> {
  return promise ? promise.catch(() => undefined) : Promise.resolve(undefined);
}

const SHOWN_EVENTS: readonly EventName[] = EVENT_NAMES.filter((name) => name !== "run.assigned");

export const demoCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const config = parseConfig(demoConfig());
    const logger = appLogger(spec, values, config);
    const dataDir = await mkdtemp(join(tmpdir(), "switchboard-demo-"));
    // Ctrl-C must not leave the temp dir behind with its LOCK, operator token and audit key.
    const interruption = onInterrupt(() => {
      if (!values["keep-data"]) rmSync(dataDir, { recursive: true, force: true });
    });
    const started = performance.now();
    const entries: TimelineEntry[] = [];
    const checks: Check[] = [];
    const runKinds = new Map<string, string>();
    const log = new EventLog(started);
    // The promises, not just the results: a signal can arrive while one is still starting, and
    // what it starts must be closed before the data dir is removed.
    let gatewayStart: Promise<Gateway> | undefined;
    let workerStart: Promise<Awaited<ReturnType<typeof startAgentWorker>>> | undefined;
    let clientStart: Promise<SwitchboardClient> | undefined;
    let failure: string | undefined;
    const progress = startProgress(io, "playing the demo scenario");
    // After a signal, start nothing more: the clean-up may already have passed that step.
    const goOn = () => {
      if (interruption.signal) throw new Error(`interrupted by ${interruption.signal}`);
    };
    const play = async () => {
      // Loaded by the commands that run them only (see `main.ts`).
      const [{ Gateway }, { startAgentWorker }] = await Promise.all([
        import("../gateway"),
        import("@switchboard/agent"),
      ]);
      gatewayStart = Gateway.start({ config, dataDir, logger, fsync: "none" });
      const gateway = await gatewayStart;
      goOn();
      workerStart = startAgentWorker({ url: gateway.url, token: gateway.operatorToken, config, logger });
      await workerStart;
      goOn();
      clientStart = connect({
        url: gateway.url,
        token: gateway.operatorToken,
        role: "operator",
        clientName: "switchboard-demo",
        clientVersion: VERSION,
      });
      const client = await clientStart;
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
    };
    try {
      await Promise.race([play(), interruption.signalled]);
    } catch (error) {
      failure = errorMessage(error);
    } finally {
      progress.stop();
      await (await settled(clientStart))?.close().catch(() => undefined);
      await (await settled(workerStart))?.stop().catch(() => undefined);
      await (await settled(gatewayStart))?.close().catch(() => undefined);
      if (!values["keep-data"]) await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
      interruption.dispose();
    }

    if (interruption.signal) {
      if (values.json) printJson(io, { ok: false, error: `interrupted by ${interruption.signal}` });
      io.err(
        `${interruption.signal}: demo stopped; ${values["keep-data"] ? `data dir kept: ${dataDir}` : "temporary data dir removed"}`,
      );
      return SIGNAL_EXIT[interruption.signal];
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
