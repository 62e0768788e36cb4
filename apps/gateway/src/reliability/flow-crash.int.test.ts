import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ConfigInput, RunRecord } from "@switchboard/core";
import { afterAll, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import {
  a2aConfig,
  nestedSpawns,
  type RunContext,
  TestWorker,
  WORKER_TOKEN as WORKER,
} from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";
import {
  type FlowGateway,
  flowChildBuilt,
  kill9,
  killFlowChildren,
  startFlowChild,
} from "./flow-crash-child";
import { readWholeAudit, readWholeHistory, seededRandom, textOf } from "./reliability-helpers";

/**
 * Crash (kill -9) in the middle of the multi-step flows of one process on the file store: a
 * `sessions_send`'s follow-up (reply-back turns, then the announce to the target's channel), a
 * spawn's announce to its requester, and the sub-agent archiver after a restart. The gateway runs
 * (built) in a child process, is killed with SIGKILL at a moment chosen deterministically (a step's
 * run held by a worker that does not answer, or queued for an agent with no worker) and started again
 * on the same data dir. What the user would see must then be as without the crash: every step runs
 * (is answered) once, the channel gets the announce once, the requester takes a sub-agent's findings
 * in once; and the records are consistent (nothing left `running`, `followUp` `done`, a spawn's
 * announce `delivered`), with the audit chain verifying.
 */

const MAIN = "agent:main:main";
const LAB = "agent:research:discord:group:lab";

if (!flowChildBuilt) {
  console.warn(
    "[flow-crash.int.test] skipped: apps/gateway/dist is missing; build first (cd /work/main && npx -y pnpm@10.34.8 build)",
  );
}

const dataDirs: string[] = [];
const openWorkers = new Set<TestWorker>();
const openPeers = new Set<TestPeer>();

afterAll(async () => {
  for (const worker of openWorkers) worker.close();
  for (const peer of openPeers) peer.close();
  killFlowChildren();
  for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
});

function config(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return a2aConfig({ session: { agentToAgent: { maxPingPongTurns: 0 } }, ...overrides });
}

async function operator(child: FlowGateway): Promise<TestPeer> {
  const peer = await TestPeer.connect(child.url, { token: child.token, role: "operator" });
  openPeers.add(peer);
  return peer;
}

type Run = RunContext["run"];

/** What a worker's run is, in the flow: `primary`, `turn<n>`, `announce`, `spawn-announce`, `task`, each @ its session. */
function stepOf(run: Run): string {
  const context = run.input.context ?? "";
  const turn = /Turn (\d+) of \d+\./.exec(context);
  if (context.includes("Agent-to-agent reply step:")) return `turn${turn?.[1]}@${run.sessionKey}`;
  if (context.includes("Agent-to-agent announce step:")) return `announce@${run.sessionKey}`;
  if (context.includes("Sub-agent announce step:")) return `spawn-announce@${run.sessionKey}`;
  if (context.includes("Agent-to-agent message context:")) return `primary@${run.sessionKey}`;
  return `task:${run.input.message}@${run.sessionKey}`;
}

/**
 * The agents' side of the test, across the gateway's lives: every step a worker answered (in order),
 * and workers that hold (never answer) the runs `hold` picks, as a worker still thinking at the kill.
 */
class Agents {
  readonly answered: string[] = [];
  readonly assigned: string[] = [];

  async worker(
    child: FlowGateway,
    agents: string[],
    hold: (step: string, run: Run) => boolean = () => false,
  ): Promise<TestWorker> {
    const act = behaviour({
      replyStep: (context) => `turn reply from ${context.run.sessionKey}`,
      announceStep: (context) =>
        stepOf(context.run).startsWith("spawn-announce") ? "noted the findings" : "the exchange is over",
    });
    const worker = await TestWorker.start(child.url, WORKER, agents, async (context) => {
      const step = stepOf(context.run);
      this.assigned.push(step);
      if (hold(step, context.run)) return new Promise<never>(() => undefined);
      const outcome = await act(context);
      this.answered.push(step);
      return outcome;
    });
    openWorkers.add(worker);
    return worker;
  }

  count(step: string): number {
    return this.answered.filter((answered) => answered === step).length;
  }
}

function sendAsMain(op: TestPeer, message: string) {
  return op.call<{ status: string; runId: string }>("tools.invoke", {
    tool: "sessions_send",
    args: { sessionKey: LAB, message, timeoutSeconds: 0 },
    as: MAIN,
  });
}

async function newDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "switchboard-flow-crash-"));
  dataDirs.push(dir);
  return dir;
}

async function runs(child: FlowGateway): Promise<RunRecord[]> {
  return child.command<RunRecord[]>("runs");
}

/** Gives the store a moment to make the state just observed durable (fsync always) before the kill. */
const settle = () => new Promise((done) => setTimeout(done, 100));

/** Deliveries of an announce to a channel, as the audit log records them (one per post). */
async function announcePosts(op: TestPeer, sessionKey: string): Promise<number> {
  const audit = await readWholeAudit(op);
  return audit.filter(
    (record) =>
      record.kind === "delivery" &&
      record.sessionKey === sessionKey &&
      (record.data as Record<string, unknown> | undefined)?.reason === "announce",
  ).length;
}

/** Waits for a send's follow-up to end (`followUp: done`) and for nothing to be left running or queued. */
async function followUpEnded(child: FlowGateway, primaryRunId: string): Promise<RunRecord[]> {
  return until(
    async () => {
      const all = await runs(child);
      const primary = all.find((run) => run.runId === primaryRunId);
      if (primary?.followUp !== "done") return false;
      return all.some((run) => run.status === "queued" || run.status === "running") ? false : all;
    },
    "the send's follow-up marked done, no run left queued or running",
    8_000,
  );
}

async function expectConsistent(child: FlowGateway, op: TestPeer): Promise<void> {
  const all = await runs(child);
  expect(
    all.filter((run) => run.status === "running" || run.status === "queued").map((run) => run.origin),
    "runs left unfinished",
  ).toEqual([]);
  expect(await op.call("audit.verify", {}), "audit chain").toMatchObject({ ok: true });
}

/** Kills the gateway where the test stopped it, restarts it on its data dir with a worker for both agents. */
async function killAndRestart(child: FlowGateway, dataDir: string, input: ConfigInput, agents: Agents) {
  await settle();
  await kill9(child);
  const again = await startFlowChild(dataDir, input);
  const op2 = await operator(again);
  await agents.worker(again, ["main", "research"]);
  return { again, op2 };
}

async function expectConsistentThenKill(child: FlowGateway, op: TestPeer): Promise<void> {
  await expectConsistent(child, op);
  await kill9(child);
}

describe.skipIf(!flowChildBuilt)("kill -9 in the middle of a send's follow-up (file store)", () => {
  // Two reply turns and an announce: the target is a discord group with a route.
  const twoTurns = config({ session: { agentToAgent: { maxPingPongTurns: 2 } } });
  const fullFlow = [`primary@${LAB}`, `turn1@${MAIN}`, `turn2@${LAB}`, `announce@${LAB}`];

  async function setUp(input: ConfigInput) {
    const dataDir = await newDataDir();
    const child = await startFlowChild(dataDir, input);
    const op = await operator(child);
    await op.call("sessions.create", { key: MAIN });
    await op.call("sessions.create", { key: LAB, channel: "discord" });
    return { dataDir, child, op };
  }

  it("primary still queued at the kill: after the restart it runs, and both turns and the announce follow once each", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(twoTurns);
    // No worker at all: the send's primary run waits queued on the target.
    const sent = await sendAsMain(op, "what is up?");
    expect(sent.status).toBe("accepted");
    expect((await runs(child)).find((run) => run.runId === sent.runId)).toMatchObject({
      status: "queued",
      followUp: "pending",
    });
    const { again, op2 } = await killAndRestart(child, dataDir, twoTurns, agents);
    await followUpEnded(again, sent.runId);
    expect(agents.answered).toEqual(fullFlow);
    expect(await announcePosts(op2, LAB), "announce posts to the channel").toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("primary held by the target's worker at the kill: its run ends `error`, and its follow-up is closed, not left pending", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(twoTurns);
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("primary"));
    const sent = await sendAsMain(op, "what is up?");
    await until(() => agents.assigned.includes(`primary@${LAB}`), "the primary assigned");
    const { again, op2 } = await killAndRestart(child, dataDir, twoTurns, agents);
    const all = await followUpEnded(again, sent.runId);
    expect(all.find((run) => run.runId === sent.runId)).toMatchObject({
      status: "error",
      error: "gateway restarted",
    });
    // No reply to take turns on: nothing follows, nothing is posted.
    expect(agents.answered).toEqual([]);
    expect(await announcePosts(op2, LAB)).toBe(0);
    await expectConsistentThenKill(again, op2);
  });

  it("turn 1 queued on the requester at the kill: after the restart it runs once, then turn 2 and the announce", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(twoTurns);
    // Only the target's agent has a worker: the primary is answered, turn 1 (into the requester) waits.
    await agents.worker(child, ["research"]);
    const sent = await sendAsMain(op, "what is up?");
    await until(
      async () => (await runs(child)).some((run) => run.origin === "reply" && run.status === "queued"),
      "turn 1 queued on the requester",
    );
    const { again, op2 } = await killAndRestart(child, dataDir, twoTurns, agents);
    const all = await followUpEnded(again, sent.runId);
    expect(agents.answered).toEqual(fullFlow);
    expect(all.filter((run) => run.origin === "reply")).toHaveLength(2);
    expect(await announcePosts(op2, LAB), "announce posts to the channel").toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("turn 1 held by a worker at the kill: after the restart it is made once more, then turn 2 and the announce", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(twoTurns);
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("turn1"));
    const sent = await sendAsMain(op, "what is up?");
    await until(() => agents.assigned.includes(`turn1@${MAIN}`), "turn 1 assigned");
    const { again, op2 } = await killAndRestart(child, dataDir, twoTurns, agents);
    const all = await followUpEnded(again, sent.runId);
    // docs/decisions.md: a step its process lost (ended `error` by recovery) is made once more under
    // a key of its own; the turns go on from there. No step is answered twice.
    const turns = all
      .filter((run) => run.origin === "reply")
      .sort((a, b) => a.createdAt - b.createdAt)
      .map((run) => [run.sessionKey, run.status, run.error ?? null]);
    expect(turns).toEqual([
      [MAIN, "error", "gateway restarted"],
      [MAIN, "ok", null],
      [LAB, "ok", null],
    ]);
    for (const step of fullFlow) expect(agents.count(step), step).toBe(1);
    expect(agents.count(`announce@${LAB}`), "announce turn answered").toBe(1);
    expect(await announcePosts(op2, LAB), "announce posts to the channel").toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("announce held by a worker at the kill: after the restart the channel still gets the announce, once", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(twoTurns);
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("announce"));
    const sent = await sendAsMain(op, "what is up?");
    await until(() => agents.assigned.includes(`announce@${LAB}`), "the announce assigned");
    const { again, op2 } = await killAndRestart(child, dataDir, twoTurns, agents);
    const all = await followUpEnded(again, sent.runId);
    // Every turn ran once before the kill, and none runs again.
    expect(agents.answered.slice(0, 3)).toEqual(fullFlow.slice(0, 3));
    for (const step of fullFlow.slice(0, 3)) expect(agents.count(step), step).toBe(1);
    const announceRuns = all
      .filter((run) => run.origin === "announce")
      .map((run) => [run.status, run.error, run.idempotencyKey]);
    expect(
      await announcePosts(op2, LAB),
      `announce posts (announce runs: ${JSON.stringify(announceRuns)})`,
    ).toBe(1);
    expect(agents.count(`announce@${LAB}`), "announce turn answered after the restart").toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("announce queued (the target's agent has no worker) at the kill: after the restart it runs and posts once", {
    timeout: 20_000,
  }, async () => {
    // One reply turn: primary (target) → turn 1 (requester) → announce (target).
    const oneTurn = config({ session: { agentToAgent: { maxPingPongTurns: 1 } } });
    const agents = new Agents();
    const { dataDir, child, op } = await setUp(oneTurn);
    let releaseTurn: () => void = () => undefined;
    const turnReleased = new Promise<void>((done) => {
      releaseTurn = done;
    });
    const research = await agents.worker(child, ["research"]);
    await TestWorker.start(child.url, WORKER, ["main"], async (context) => {
      // Turn 1 is answered only once the target's worker is gone, so the announce waits queued.
      agents.assigned.push(stepOf(context.run));
      await turnReleased;
      agents.answered.push(stepOf(context.run));
      return "turn reply from main";
    }).then((worker) => openWorkers.add(worker));
    const sent = await sendAsMain(op, "what is up?");
    await until(() => agents.assigned.includes(`turn1@${MAIN}`), "turn 1 assigned");
    research.close();
    // The gateway notices the closed socket at once on localhost; give it a moment.
    await new Promise((done) => setTimeout(done, 200));
    releaseTurn();
    await until(
      async () => (await runs(child)).some((run) => run.origin === "announce" && run.status === "queued"),
      "the announce queued on the target",
    );
    const { again, op2 } = await killAndRestart(child, dataDir, oneTurn, agents);
    const all = await followUpEnded(again, sent.runId);
    expect(agents.answered).toEqual([`primary@${LAB}`, `turn1@${MAIN}`, `announce@${LAB}`]);
    expect(all.filter((run) => run.origin === "announce")).toHaveLength(1);
    expect(await announcePosts(op2, LAB), "announce posts to the channel").toBe(1);
    await expectConsistentThenKill(again, op2);
  });
});

describe.skipIf(!flowChildBuilt)("kill -9 in the middle of a spawn's announce (file store)", () => {
  const input = config();

  async function setUp() {
    const dataDir = await newDataDir();
    const child = await startFlowChild(dataDir, input);
    const op = await operator(child);
    await op.call("sessions.create", { key: MAIN });
    return { dataDir, child, op };
  }

  function spawnFromMain(op: TestPeer, task: string) {
    return op.call<{ status: string; runId: string; childSessionKey: string }>("tools.invoke", {
      tool: "sessions_spawn",
      args: { task, agentId: "research" },
      as: MAIN,
    });
  }

  /** Waits for the spawn's announce to leave `pending`, and for nothing to be left queued or running. */
  async function announceEnded(child: FlowGateway, spawnRunId: string) {
    return until(
      async () => {
        const all = await runs(child);
        const spawnRun = all.find((run) => run.runId === spawnRunId);
        if (!spawnRun?.spawn || spawnRun.spawn.announce.status === "pending") return false;
        if (all.some((run) => run.status === "queued" || run.status === "running")) return false;
        return {
          spawnRun,
          announceRuns: all
            .filter((run) => run.origin === "spawn-announce")
            .sort((a, b) => a.createdAt - b.createdAt),
        };
      },
      "the spawn's announce settled",
      8_000,
    );
  }

  /** The requester's transcript: how many times it took the child's findings in. */
  async function findingsInputs(op: TestPeer, childKey: string): Promise<number> {
    const history = await readWholeHistory(op, MAIN);
    return history.filter((message) => message.role === "user" && textOf(message).includes(childKey)).length;
  }

  it("child run held at the kill: after the restart the requester hears of its failure once, delivered", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp();
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("task:find the answer"));
    const spawned = await spawnFromMain(op, "find the answer");
    expect(spawned.status).toBe("accepted");
    await until(
      () => agents.assigned.some((step) => step.startsWith("task:find the answer")),
      "child running",
    );
    const { again, op2 } = await killAndRestart(child, dataDir, input, agents);
    const { spawnRun, announceRuns } = await announceEnded(again, spawned.runId);
    expect(spawnRun).toMatchObject({ status: "error", error: "gateway restarted" });
    expect(spawnRun.spawn!.announce.status).toBe("delivered");
    expect(announceRuns.map((run) => run.status)).toEqual(["ok"]);
    expect(announceRuns[0]!.message).toContain("failed: gateway restarted");
    expect(agents.count(`spawn-announce@${MAIN}`)).toBe(1);
    expect(await findingsInputs(op2, spawned.childSessionKey)).toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("announce run queued (the requester's agent has no worker) at the kill: after the restart it runs once, delivered", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp();
    await agents.worker(child, ["research"]);
    const spawned = await spawnFromMain(op, "find the answer");
    // The announce run is made, queued on the requester, and named in the spawn's record.
    await until(async () => {
      const all = await runs(child);
      const announce = all.find((run) => run.runId === spawned.runId)?.spawn?.announce;
      const queued = all.find((run) => run.origin === "spawn-announce" && run.status === "queued");
      return queued !== undefined && announce?.status === "pending" && announce.runId === queued.runId;
    }, "the announce queued on the requester");
    const { again, op2 } = await killAndRestart(child, dataDir, input, agents);
    const { spawnRun, announceRuns } = await announceEnded(again, spawned.runId);
    expect(spawnRun.spawn!.announce).toMatchObject({ status: "delivered", attempts: 1 });
    expect(announceRuns.map((run) => run.status)).toEqual(["ok"]);
    expect(agents.answered).toEqual([
      `task:find the answer@${spawned.childSessionKey}`,
      `spawn-announce@${MAIN}`,
    ]);
    expect(await findingsInputs(op2, spawned.childSessionKey)).toBe(1);
    await expectConsistentThenKill(again, op2);
  });

  it("announce run held by the requester's worker at the kill: after the restart it is retried once and delivered", {
    timeout: 20_000,
  }, async () => {
    const agents = new Agents();
    const { dataDir, child, op } = await setUp();
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("spawn-announce"));
    const spawned = await spawnFromMain(op, "find the answer");
    await until(() => agents.assigned.includes(`spawn-announce@${MAIN}`), "the announce assigned");
    const { again, op2 } = await killAndRestart(child, dataDir, input, agents);
    const { spawnRun, announceRuns } = await announceEnded(again, spawned.runId);
    expect(spawnRun.spawn!.announce).toMatchObject({ status: "delivered", attempts: 2 });
    // The turn killed with the process ended `error`; one retry under its own key was answered.
    expect(announceRuns.map((run) => [run.status, run.idempotencyKey])).toEqual([
      ["error", `announce:${spawned.childSessionKey}`],
      ["ok", `announce:${spawned.childSessionKey}:2`],
    ]);
    expect(agents.count(`spawn-announce@${MAIN}`), "announce turns answered").toBe(1);
    await expectConsistentThenKill(again, op2);
  });
});

describe.skipIf(!flowChildBuilt)(
  "kill -9 around a child's end, at seeded random moments (file store)",
  () => {
    const ROUNDS = 6;
    const SEED = 20_260_214;

    it(`every spawn's findings reach the requester once, delivered, across ${ROUNDS} kills just after a child answers`, {
      timeout: 30_000,
    }, async () => {
      const input = config();
      const random = seededRandom(SEED);
      const dataDir = await newDataDir();
      // One worker per gateway life; it holds the current round's child until the test releases it.
      let held: { task: string; assigned: boolean; gate: Promise<void> } | undefined;
      const act = behaviour({ announceStep: () => "noted the findings" });
      const start = async () => {
        const started = await startFlowChild(dataDir, input);
        const worker = await TestWorker.start(started.url, WORKER, ["main", "research"], async (context) => {
          if (held && context.run.input.message === held.task) {
            held.assigned = true;
            await held.gate;
          }
          return act(context);
        });
        openWorkers.add(worker);
        return { started, worker, op: await operator(started) };
      };
      let { started: child, worker, op } = await start();
      await op.call("sessions.create", { key: MAIN });
      const spawned: Array<{ runId: string; childKey: string; delay: number }> = [];
      for (let round = 0; round < ROUNDS; round++) {
        let release: () => void = () => undefined;
        const gate = new Promise<void>((done) => {
          release = done;
        });
        const current = { task: `find answer ${round}`, assigned: false, gate };
        held = current;
        const result = await op.call<{ runId: string; childSessionKey: string }>("tools.invoke", {
          tool: "sessions_spawn",
          args: { task: current.task, agentId: "research" },
          as: MAIN,
        });
        // Between the child's end, its announce run and the requester's turn on it, at 0-30 ms.
        const delay = Math.floor(random() * 30);
        spawned.push({ runId: result.runId, childKey: result.childSessionKey, delay });
        await until(() => current.assigned, "the child assigned");
        release();
        await new Promise((done) => setTimeout(done, delay));
        await kill9(child);
        worker.close();
        held = undefined;

        ({ started: child, worker, op } = await start());
        const all = await until(
          async () => {
            const listed = await runs(child);
            const settled = spawned.every(
              (spawn) =>
                listed.find((run) => run.runId === spawn.runId)?.spawn?.announce.status !== "pending",
            );
            return settled && !listed.some((run) => run.status === "queued" || run.status === "running")
              ? listed
              : false;
          },
          `round ${round} (seed ${SEED}, kill ${delay} ms after the child answered): every announce settled`,
          8_000,
        );
        for (const spawn of spawned) {
          const where = `round ${round}, spawn killed ${spawn.delay} ms after its child answered`;
          const record = all.find((run) => run.runId === spawn.runId)!;
          expect(record.spawn!.announce.status, where).toBe("delivered");
          const turns = all.filter(
            (run) =>
              run.origin === "spawn-announce" &&
              run.provenance?.kind === "subagent" &&
              run.provenance.runId === spawn.runId,
          );
          expect(
            turns.filter((run) => run.status === "ok"),
            `${where}: requester turns on the findings that ended ok`,
          ).toHaveLength(1);
        }
        expect(await op.call("audit.verify", {}), `round ${round}: audit chain`).toMatchObject({ ok: true });
      }
      await kill9(child);
    });
  },
);

describe.skipIf(!flowChildBuilt)("kill -9 and the sub-agent archiver (file store)", () => {
  it("a child whose own sub-agent was running at the kill is not archived until that sub-agent's announce has run", {
    timeout: 20_000,
  }, async () => {
    const input = config(nestedSpawns);
    const agents = new Agents();
    const dataDir = await newDataDir();
    const child = await startFlowChild(dataDir, input);
    const op = await operator(child);
    await op.call("sessions.create", { key: MAIN });
    // The grandchild ("dig") is still thinking at the kill; everything else is answered.
    await agents.worker(child, ["main", "research"], (step) => step.startsWith("task:dig"));
    const task = `call sessions_spawn ${JSON.stringify({ task: "dig", agentId: "research" })}`;
    const spawned = await op.call<{ status: string; runId: string; childSessionKey: string }>(
      "tools.invoke",
      {
        tool: "sessions_spawn",
        args: { task, agentId: "research" },
        as: MAIN,
      },
    );
    const childKey = spawned.childSessionKey;
    await until(() => agents.assigned.some((step) => step.startsWith("task:dig")), "the grandchild running");
    // The child's own announce to main is done before the kill.
    await until(
      async () =>
        (await runs(child)).find((run) => run.runId === spawned.runId)?.spawn?.announce.status ===
        "delivered",
      "the child's announce delivered",
    );
    await settle();
    await kill9(child);

    // No worker after the restart: the grandchild's announce to the child waits.
    const again = await startFlowChild(dataDir, input);
    const op2 = await operator(again);
    await until(
      async () =>
        (await runs(again)).some(
          (run) => run.origin === "spawn-announce" && run.sessionKey === childKey && run.status === "queued",
        ),
      "the grandchild's announce queued on the child",
    );
    // The grandchild itself (its run ended by the restart, nothing to come on it) may go; the child,
    // which its findings are still to reach, may not.
    await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 });
    expect(
      (await again.command<{ archivedAt?: number }>("session", { key: childKey }))?.archivedAt,
      "the child archived with its sub-agent's report still to come",
    ).toBeUndefined();

    await agents.worker(again, ["main", "research"]);
    await until(
      async () => {
        const all = await runs(again);
        return (
          all.every((run) => run.spawn?.announce.status !== "pending") &&
          !all.some((run) => run.status === "queued" || run.status === "running")
        );
      },
      "every announce settled",
      8_000,
    );
    expect(agents.count(`spawn-announce@${childKey}`), "the child took its sub-agent's report in").toBe(1);
    await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 });
    expect(
      (await again.command<{ archivedAt?: number }>("session", { key: childKey }))?.archivedAt,
    ).toBeGreaterThan(0);
    await expectConsistentThenKill(again, op2);
  });

  it("a child whose own sub-agent was still queued at the kill is not archived until that sub-agent has reported to it", {
    timeout: 20_000,
  }, async () => {
    // The child (research) spawns its sub-agent on `main`, whose agent has no worker before the kill:
    // nothing is queued on the child's own session, only its sub-agent is still to run and report.
    const input = config({
      ...nestedSpawns,
      agents: {
        list: [
          { id: "main", default: true, subagents: { allowAgents: ["research"], maxSpawnDepth: 2 } },
          { id: "research", subagents: { allowAgents: ["main"], maxSpawnDepth: 2 } },
        ],
      },
    });
    const agents = new Agents();
    const dataDir = await newDataDir();
    const child = await startFlowChild(dataDir, input);
    const op = await operator(child);
    await op.call("sessions.create", { key: MAIN });
    await agents.worker(child, ["research"]);
    const task = `call sessions_spawn ${JSON.stringify({ task: "dig", agentId: "main" })}`;
    const spawned = await op.call<{ status: string; runId: string; childSessionKey: string }>(
      "tools.invoke",
      {
        tool: "sessions_spawn",
        args: { task, agentId: "research" },
        as: MAIN,
      },
    );
    const childKey = spawned.childSessionKey;
    await until(
      async () =>
        (await runs(child)).some(
          (run) => run.origin === "spawn" && run.spawn?.requesterKey === childKey && run.status === "queued",
        ),
      "the grandchild queued",
    );
    await settle();
    await kill9(child);

    const again = await startFlowChild(dataDir, input);
    const op2 = await operator(again);
    const before = await runs(again);
    expect(before.find((run) => run.runId === spawned.runId)?.status, "the child's own run").toBe("ok");
    expect(
      before.filter(
        (run) => run.sessionKey === childKey && (run.status === "queued" || run.status === "running"),
      ),
      "runs to come on the child's own session",
    ).toEqual([]);
    await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 });
    expect(
      (await again.command<{ archivedAt?: number }>("session", { key: childKey }))?.archivedAt,
      "the child archived with its sub-agent still to run",
    ).toBeUndefined();

    await agents.worker(again, ["main", "research"]);
    await until(
      async () => {
        const all = await runs(again);
        return (
          all.every((run) => run.spawn?.announce.status !== "pending") &&
          !all.some((run) => run.status === "queued" || run.status === "running")
        );
      },
      "every announce settled",
      8_000,
    );
    const grandchildKey = before.find((run) => run.spawn?.requesterKey === childKey)!.spawn!.childKey;
    expect(agents.count(`task:dig@${grandchildKey}`), "the sub-agent ran").toBe(1);
    expect(agents.count(`spawn-announce@${childKey}`), "the child took its sub-agent's report in").toBe(1);
    await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 });
    expect(
      (await again.command<{ archivedAt?: number }>("session", { key: childKey }))?.archivedAt,
    ).toBeGreaterThan(0);
    await expectConsistentThenKill(again, op2);
  });

  it("a finished child with a send queued on it at the kill is not archived before that send has run", {
    timeout: 20_000,
  }, async () => {
    const input = config();
    const agents = new Agents();
    const dataDir = await newDataDir();
    const child = await startFlowChild(dataDir, input);
    const op = await operator(child);
    await op.call("sessions.create", { key: MAIN });
    const first = await agents.worker(child, ["main", "research"]);
    const spawned = await op.call<{ runId: string; childSessionKey: string }>("tools.invoke", {
      tool: "sessions_spawn",
      args: { task: "look around", agentId: "research" },
      as: MAIN,
    });
    const childKey = spawned.childSessionKey;
    await until(
      async () =>
        (await runs(child)).find((run) => run.runId === spawned.runId)?.spawn?.announce.status ===
        "delivered",
      "the child's announce delivered",
    );
    first.close();
    await new Promise((done) => setTimeout(done, 200));
    const sent = await op.call<{ status: string; runId: string; delivery: { status: string } }>(
      "tools.invoke",
      {
        tool: "sessions_send",
        args: { sessionKey: childKey, message: "one more thing", timeoutSeconds: 0 },
        as: MAIN,
      },
    );
    expect(sent).toMatchObject({ status: "accepted", delivery: { status: "queued" } });
    await settle();
    await kill9(child);

    const again = await startFlowChild(dataDir, input);
    const op2 = await operator(again);
    expect(await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 })).toBe(0);
    await agents.worker(again, ["main", "research"]);
    expect(await op2.call("agent.wait", { runId: sent.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "echo: one more thing",
    });
    const history = await readWholeHistory(op2, childKey);
    expect(history.map(textOf)).toContain("echo: one more thing");
    await until(
      async () => !(await runs(again)).some((run) => run.status === "queued" || run.status === "running"),
      "nothing left to run",
    );
    expect(await again.command<number>("sweep", { endedBefore: Date.now() + 60_000 })).toBe(1);
    await expectConsistentThenKill(again, op2);
  });
});
