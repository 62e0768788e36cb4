import { adminQuery } from "@switchboard/store-pg/testing";
import { afterEach, describe, expect, it } from "vitest";
import { CLUSTER_WORKER_TOKEN, useClusterProcesses } from "../testing/cluster-processes";
import { TestWorker } from "../testing/test-gateway";

/**
 * Agent-to-agent flows (a send's follow-up, a spawn's announce, a wait for a run held elsewhere) on
 * several gateway instances (the built gateway in child processes, as in cluster.int.test.ts), when
 * one instance stops or dies part-way.
 */

const cluster = await useClusterProcesses("cluster-flow-edges.int.test", "sbgwflow");
const WORKER_TOKEN = CLUSTER_WORKER_TOKEN;
const startCluster = (count: number) => cluster.start(count);
const operator = cluster.operator;
const workers: TestWorker[] = [];
afterEach(() => {
  for (const worker of workers.splice(0)) worker.close();
});

async function worker(
  url: string,
  agents: string[],
  handler: Parameters<typeof TestWorker.start>[3],
): Promise<TestWorker> {
  const started = await TestWorker.start(url, WORKER_TOKEN, agents, handler);
  workers.push(started);
  return started;
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));
const never = () => new Promise<never>(() => undefined);

async function until(check: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check()) && Date.now() < deadline) await sleep(50);
}

const messagesOf = (w: TestWorker, text: string) => w.runs.filter((run) => run.input.message === text);

describe.skipIf(cluster.skip)(
  "agent-to-agent flows on several instances when one stops or dies part-way",
  () => {
    it("makes a send's reply turn again, once, on another instance when the instance running the follow-up stops gracefully mid-turn", async () => {
      const {
        instances: [a, b],
      } = await startCluster(2);
      // A's worker of main takes the requester's reply turn and never answers it: it is running on A
      // when A stops (SIGTERM), which ends it `gateway shutting down`.
      const stuck = await worker(a!.url, ["main"], never);
      await worker(b!.url, ["relay"], () => "pong");
      const opA = await operator(a!);
      const opB = await operator(b!);
      const asker = "agent:main:cron:asker";
      const target = "agent:relay:cron:target";
      await opA.call("sessions.create", { key: asker });
      await opA.call("sessions.create", { key: target });
      await sleep(1500); // A reads which agents have workers elsewhere every second
      const sent = await opA.call<{ status: string }>("tools.invoke", {
        tool: "sessions_send",
        args: { sessionKey: target, message: "ping", timeoutSeconds: 0 },
        as: asker,
      });
      expect(sent.status).toBe("accepted");
      await until(() => messagesOf(stuck, "pong").length > 0, 10_000);
      expect(messagesOf(stuck, "pong")).toHaveLength(1);
      // A worker of main elsewhere, for the turn A never got an answer to.
      const survivor = await worker(b!.url, ["main"], () => "REPLY_SKIP");
      a!.process.kill("SIGTERM");
      await a!.exited;
      // Expected (decisions.md: a step whose run died with its process is made once more under
      // `…:again`; cluster.md: a send's follow-up is made exactly once cluster-wide): B makes turn 1
      // again, once.
      await until(() => messagesOf(survivor, "pong").length > 0, 8_000);
      await sleep(2500); // a further takeover round of the leader
      expect(messagesOf(survivor, "pong")).toHaveLength(1);
      opB.close();
    }, 45_000);

    it("guard: delivers a spawn's announce once, by another instance's retry, when the instance running the announce run stops gracefully", async () => {
      const {
        instances: [a, b],
      } = await startCluster(2);
      const announce = (message: string) => message.startsWith("Sub-agent ");
      // On A: the child answers; the requester's announce run never does (ended by A's stop).
      const onA = await worker(a!.url, ["main"], (context) =>
        announce(context.run.input.message) ? never() : "child findings",
      );
      const opA = await operator(a!);
      const opB = await operator(b!);
      const parent = "agent:main:cron:parent";
      await opA.call("sessions.create", { key: parent });
      const spawned = await opA.call<{ status: string; childSessionKey: string }>("tools.invoke", {
        tool: "sessions_spawn",
        args: { task: "find things" },
        as: parent,
      });
      expect(spawned.status).toBe("accepted");
      await until(() => onA.runs.some((run) => announce(run.input.message)), 10_000);
      expect(onA.runs.filter((run) => announce(run.input.message))).toHaveLength(1);
      const onB = await worker(b!.url, ["main"], () => "ANNOUNCE_SKIP");
      a!.process.kill("SIGTERM");
      await a!.exited;
      await until(() => onB.runs.length > 0, 8_000);
      await sleep(2500); // a further takeover round of the leader
      // The requester takes the findings in once more (attempt 2), and only once.
      expect(onB.runs.map((run) => announce(run.input.message))).toEqual([true]);
      opB.close();
    }, 40_000);

    it("answers a wait on another instance only once the run's reply is in the transcript, also when the transcript write is slow", async () => {
      const {
        schema,
        instances: [a, b],
      } = await startCluster(2);
      const reply = "slow-transcript-reply";
      // The reply's transcript entry takes 3 s to write (a busy table, a slow disk): the run's record
      // is ended first, its `run.ended` event goes out once the entry is written.
      await adminQuery(
        `CREATE FUNCTION "${schema}".slow_reply() RETURNS trigger LANGUAGE plpgsql AS $body$
         BEGIN
           IF NEW.entry::text LIKE '%${reply}%' THEN PERFORM pg_sleep(3); END IF;
           RETURN NEW;
         END $body$;
         CREATE TRIGGER slow_reply BEFORE INSERT ON "${schema}".transcript_entries
           FOR EACH ROW EXECUTE FUNCTION "${schema}".slow_reply();`,
      );
      await worker(a!.url, ["main"], async () => {
        await sleep(200);
        return reply;
      });
      const opA = await operator(a!);
      const opB = await operator(b!);
      const sessionKey = "agent:main:cron:slow-transcript";
      await opA.call("sessions.create", { key: sessionKey });
      const { runId } = await opA.call<{ runId: string }>("chat.send", { sessionKey, message: "hello" });
      // Held on A; waited for on B (which re-reads the record when the event is late).
      const answer = await opB.call<{ status: string; reply?: string }>("agent.wait", {
        runId,
        timeoutMs: 20_000,
      });
      expect(answer).toMatchObject({ status: "ok", reply });
      // The caller reads the history after its wait (cluster-runs.ts: the grace before a re-read
      // answers exists so that it finds the reply there).
      const history = await opB.call<{ messages: unknown[] }>("sessions.history", { sessionKey, limit: 50 });
      expect(history.messages.filter((message) => JSON.stringify(message).includes(reply))).toHaveLength(1);
      opA.close();
      opB.close();
    }, 30_000);

    it("makes a send's reply turn whose run died with a SIGKILLed instance once a worker comes, as a restart does", async () => {
      const {
        schema,
        instances: [a, b],
      } = await startCluster(2);
      // The follow-up lives on A (the send is accepted there, the target runs there); the requester's
      // reply turn runs on B's only worker of main, and B is killed with it.
      await worker(a!.url, ["relay"], () => "pong");
      const doomed = await worker(b!.url, ["main"], never);
      const opA = await operator(a!);
      const asker = "agent:main:cron:asker";
      const target = "agent:relay:cron:target";
      await opA.call("sessions.create", { key: asker });
      await opA.call("sessions.create", { key: target });
      await sleep(1500);
      const sent = await opA.call<{ status: string }>("tools.invoke", {
        tool: "sessions_send",
        args: { sessionKey: target, message: "ping", timeoutSeconds: 0 },
        as: asker,
      });
      expect(sent.status).toBe("accepted");
      await until(() => messagesOf(doomed, "pong").length > 0, 10_000);
      expect(messagesOf(doomed, "pong")).toHaveLength(1);
      b!.process.kill("SIGKILL");
      await b!.exited;
      // B's worker reconnects late (after the 1.5 s reassignment window: its run ended `error`
      // naming B). One process makes such a turn again under `turn:1:again`; here it is lost.
      await until(async () => {
        const turn = await adminQuery(
          `SELECT 1 FROM "${schema}".runs WHERE idempotency_key LIKE '%:turn:1' AND status = 'error'`,
        );
        return turn.rowCount === 1;
      }, 15_000);
      const late = await worker(a!.url, ["main"], () => "REPLY_SKIP");
      await until(() => messagesOf(late, "pong").length > 0, 8_000);
      expect(messagesOf(late, "pong")).toHaveLength(1);
      opA.close();
    }, 45_000);
  },
);
