import { adminQuery } from "@switchboard/store-pg/testing";
import { describe, expect, it } from "vitest";
import { CLUSTER_WORKER_TOKEN, useClusterProcesses } from "../testing/cluster-processes";
import { deferred } from "../testing/deferred";
import { TestWorker } from "../testing/test-gateway";
import { until } from "../testing/until";

/**
 * Gateway instances on one PostgreSQL schema (the built gateway in child processes, as in
 * cluster.int.test.ts), off the usual paths: the database refusing what the instances write.
 */

const cluster = await useClusterProcesses("cluster-edges.int.test", "sbgwedge");
const WORKER_TOKEN = CLUSTER_WORKER_TOKEN;
const startCluster = (count: number) => cluster.start(count);
const operator = cluster.operator;

/**
 * The cluster's event log refuses the first publish of the run's `run.ended` (its statement fails,
 * as when the database is unreachable a moment): the run's record is ended, its event never is.
 */
async function refuseRunEndedOnce(schema: string, runId: string, name: string): Promise<void> {
  const counter = `"${schema}"."${name}_count"`;
  const fn = `"${schema}"."${name}"`;
  // A sequence, not a table: its count survives the rollback of the statement it fails.
  await adminQuery(
    `CREATE SEQUENCE ${counter};
     CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $body$
     BEGIN
       IF NEW.event = 'run.ended' AND NEW.payload->>'runId' = '${runId}' AND nextval('${counter}') = 1 THEN
         RAISE EXCEPTION 'test: the event log refuses this run.ended once';
       END IF;
       RETURN NEW;
     END $body$;
     CREATE TRIGGER "${name}" BEFORE INSERT ON "${schema}".events FOR EACH ROW EXECUTE FUNCTION ${fn}();`,
  );
}

/** How many `run.ended` events of the run the log holds, and whether its publish was refused. */
async function endEvents(schema: string, runId: string, name: string) {
  const held = await adminQuery<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${schema}".events WHERE event = 'run.ended' AND payload->>'runId' = $1`,
    [runId],
  );
  const refused = await adminQuery<{ is_called: boolean }>(
    `SELECT is_called FROM "${schema}"."${name}_count"`,
  );
  return { held: held.rows[0]!.n, refused: refused.rows[0]!.is_called };
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

type WaitAnswer = { status: string; reply?: string };

describe.skipIf(cluster.skip)("gateway instances on one database, off the usual paths", () => {
  // Before session 21 the reset ended only the runs of the instance that took it: the run held by
  // B ended `ok`, and a PUBLIC session's waiting send took its CONFIDENTIAL reply in at the reset
  // transcript's PUBLIC taint. Until session 22 a worker's error text (`run.fail`) still went through.
  for (const end of ["reply", "error"] as const)
    it(`a reset on one instance ends a run of the old transcript held by another: its ${end} never reaches a PUBLIC caller`, async () => {
      const {
        instances: [a, b],
      } = await startCluster(2);
      const op = await operator(a!);
      const TARGET = "agent:main:main";
      const VAULT = "agent:main:vault:dm:cfo";
      const LOBBY = "agent:main:discord:group:dev";
      await op.call("sessions.create", { key: VAULT });
      await op.call("chat.send", { sessionKey: VAULT, message: "Q3 revenue miss: -38% (embargoed)" });
      await op.call("sessions.create", { key: TARGET });
      await op.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: VAULT }, as: TARGET });
      await op.call("sessions.create", { key: LOBBY });
      expect((await op.call<{ taint: string }>("sessions.status", { sessionKey: TARGET })).taint).toBe(
        "CONFIDENTIAL",
      );
      const { promise: gate, resolve: release } = deferred();
      let started = false;
      let sent: Record<string, unknown> | undefined;
      // The only worker is on B: every run is held there.
      const worker = await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], async ({ run, invokeTool }) => {
        if (run.input.context.includes("reply step")) return "REPLY_SKIP";
        if (run.sessionKey === TARGET) {
          started = true;
          await gate;
          return end === "reply"
            ? "the embargoed figure is -38%"
            : { fail: "tool crashed while quoting: the embargoed figure is -38%" };
        }
        if (run.sessionKey === LOBBY && run.input.message === "ask") {
          sent = await invokeTool("sessions_send", {
            sessionKey: TARGET,
            message: "Q3?",
            timeoutSeconds: 20,
          });
          return "done";
        }
        return "ok";
      });
      const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: LOBBY, message: "ask" });
      await until(() => started, "the target's run on B");
      await op.call("sessions.reset", { key: TARGET });
      release();
      expect(await op.call<WaitAnswer>("agent.wait", { runId, timeoutMs: 20_000 })).toMatchObject({
        status: "ok",
      });
      expect(sent).toMatchObject({ status: "error", error: expect.stringContaining("reset") });
      expect(JSON.stringify(sent)).not.toContain("-38%");
      expect((await op.call<{ taint: string }>("sessions.status", { sessionKey: LOBBY })).taint).toBe(
        "PUBLIC",
      );
      worker.close();
    });

  it("session status on one instance shows a run held by another", async () => {
    const {
      instances: [a, b],
    } = await startCluster(2);
    const opA = await operator(a!);
    const { promise: gate, resolve: release } = deferred();
    const worker = await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], async () => {
      await gate;
      return "done";
    });
    const key = "agent:main:cron:held-on-b";
    await opA.call("sessions.create", { key });
    const { runId } = await opA.call<{ runId: string }>("chat.send", { sessionKey: key, message: "work" });
    const shown = await until(async () => {
      const status = await opA.call<{ activeRun?: { runId: string } }>("sessions.status", {
        sessionKey: key,
      });
      return status.activeRun;
    }, "the run held by B in A's status");
    expect(shown.runId).toBe(runId);
    release();
    expect(await opA.call<WaitAnswer>("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
    });
    worker.close();
  });

  it("writes of one session's row from two instances at once lose nothing: no taint goes down, no reset or delete is undone", async () => {
    // Before session 21 each instance wrote the whole row it had read (an in-process lock only): of
    // two concurrent rises the lower could land last (19/60 sessions read CONFIDENTIAL data and
    // ended INTERNAL), and a patch on B could put back the row a reset or delete on A had replaced.
    const {
      instances: [a, b],
    } = await startCluster(2);
    const opA = await operator(a!);
    const opB = await operator(b!);
    const worker = await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], () => "ok");
    const VAULT = "agent:main:vault:dm:cfo";
    const INTRA = "agent:main:intranet:dm:bob";
    for (const [key, message] of [
      [VAULT, "the secret"],
      [INTRA, "the internal memo"],
    ] as const) {
      await opA.call("sessions.create", { key });
      const { runId } = await opA.call<{ runId: string }>("chat.send", { sessionKey: key, message });
      await opA.call("agent.wait", { runId, timeoutMs: 10_000 });
    }
    const taintOf = async (key: string) =>
      (await opA.call<{ taint: string }>("sessions.status", { sessionKey: key })).taint;
    expect([await taintOf(VAULT), await taintOf(INTRA)]).toEqual(["CONFIDENTIAL", "INTERNAL"]);
    for (let i = 0; i < 20; i++) {
      const reader = `agent:main:cron:reader-${i}`;
      await opA.call("sessions.create", { key: reader });
      await Promise.all([
        opA.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: VAULT }, as: reader }),
        opB.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: INTRA }, as: reader }),
        opB.call("sessions.patch", { key: reader, label: `reader ${i}` }),
      ]);
      expect(await taintOf(reader)).toBe("CONFIDENTIAL");
    }
    for (const mode of ["reset", "delete"] as const) {
      for (let i = 0; i < 10; i++) {
        const key = `agent:main:cron:${mode}-${i}`;
        await opA.call("sessions.create", { key });
        await Promise.all([
          opA.call(`sessions.${mode}`, { key }),
          (async () => {
            for (let k = 0; k < 6; k++) await opB.request("sessions.patch", { key, label: `label ${k}` });
          })(),
        ]);
        const history = await opA.request("sessions.history", { sessionKey: key });
        // Reset: the row points at the new, live transcript. Delete: the session stays gone.
        if (mode === "reset") expect(history.ok).toBe(true);
        else expect(history.error?.code).toBe("NOT_FOUND");
      }
    }
    worker.close();
  });

  it("answers a wait on another instance soon after the run ended when its run.ended event could not be published", async () => {
    const {
      schema,
      instances: [a, b],
    } = await startCluster(2);
    const gates = new Map<string, () => void>();
    // Only A has a worker: runs accepted on B are handed to the cluster's queue and adopted by A.
    const worker = await TestWorker.start(
      a!.url,
      WORKER_TOKEN,
      ["main"],
      (context) =>
        new Promise<string>((done) =>
          gates.set(context.run.input.message, () => done(`done: ${context.run.input.message}`)),
        ),
    );
    const opA = await operator(a!);
    const opB = await operator(b!);
    // A run accepted on A and held there (B's wait reads its record, then waits for the event),
    // and one accepted on B and handed off (B's wait follows the event it tracks since then).
    for (const [accept, message] of [
      [opA, "held"],
      [opB, "handed"],
    ] as const) {
      const sessionKey = `agent:main:cron:lost-end-${message}`;
      await accept.call("sessions.create", { key: sessionKey });
      const { runId } = await accept.call<{ runId: string }>("chat.send", { sessionKey, message });
      while (!gates.has(message)) await sleep(20);
      const name = `refuse_${message}`;
      await refuseRunEndedOnce(schema, runId, name);
      const waiting = opB.call<WaitAnswer>("agent.wait", { runId, timeoutMs: 20_000 });
      await sleep(300);
      const ended = Date.now();
      gates.get(message)!();
      const answer = await waiting;
      const took = Date.now() - ended;
      // Soft: each of the two paths is reported on its own.
      expect.soft(answer, message).toMatchObject({ status: "ok", reply: `done: ${message}` });
      expect.soft(took, message).toBeLessThan(6_000);
      // The end was never published: the wait learned it otherwise.
      expect.soft(await endEvents(schema, runId, name), message).toEqual({ held: 0, refused: true });
    }
    expect(worker.runs).toHaveLength(2);
    worker.close();
  }, 60_000);

  // Before session 22 a failed release of an ended run's lane (the database out for a moment) was
  // only logged: the claim stayed, no sweep takes a live instance's claims, and every later run of
  // that session waited on every instance until the ended run's timeout.
  it("frees an ended run's lane once the database takes the release again", async () => {
    const {
      schema,
      instances: [a],
    } = await startCluster(1);
    const worker = await TestWorker.start(
      a!.url,
      WORKER_TOKEN,
      ["main"],
      (context) => `done: ${context.run.input.message}`,
    );
    const op = await operator(a!);
    const sessionKey = "agent:main:cron:release-refused";
    await op.call("sessions.create", { key: sessionKey });
    const counter = `"${schema}"."refuse_release_count"`;
    await adminQuery(
      `CREATE SEQUENCE ${counter};
       CREATE FUNCTION "${schema}".refuse_release() RETURNS trigger LANGUAGE plpgsql AS $body$
       BEGIN
         IF nextval('${counter}') <= 2 THEN RAISE EXCEPTION 'test: the database refuses this release'; END IF;
         RETURN OLD;
       END $body$;
       CREATE TRIGGER refuse_release BEFORE DELETE ON "${schema}".run_claims
         FOR EACH ROW EXECUTE FUNCTION "${schema}".refuse_release();`,
    );
    const first = await op.call<{ runId: string }>("chat.send", { sessionKey, message: "one" });
    expect(await op.call<WaitAnswer>("agent.wait", { runId: first.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
    });
    const second = await op.call<{ runId: string }>("chat.send", { sessionKey, message: "two" });
    expect(await op.call<WaitAnswer>("agent.wait", { runId: second.runId, timeoutMs: 10_000 })).toMatchObject(
      {
        status: "ok",
        reply: "done: two",
      },
    );
    worker.close();
  }, 30_000);

  // Before session 22 an instance stopped past its lease went on taking the tool calls of the runs
  // it held once it ran again, though the cluster had reassigned them: a run's side effects happened
  // twice (its late end was dropped already).
  it("lets go of the runs it held once it learns it was declared lost: their tool calls are refused", async () => {
    const {
      instances: [a, b],
    } = await startCluster(2);
    const TARGET = "agent:relay:cron:target";
    const { promise: gate, resolve: release } = deferred();
    const calls: Record<string, unknown> = {};
    const acting = (where: string, wait: () => Promise<unknown>) =>
      (async ({ run, invokeTool }) => {
        if (run.input.message !== "m1") return "REPLY_SKIP";
        calls[`${where} started`] = true;
        await wait();
        calls[where] = await invokeTool("sessions_send", {
          sessionKey: TARGET,
          message: `side effect from ${where}`,
          timeoutSeconds: 0,
        }).catch((error: Error & { code?: string }) => ({ refused: error.code }));
        return `${where} done`;
      }) satisfies Parameters<typeof TestWorker.start>[3];
    const relay = await TestWorker.start(b!.url, WORKER_TOKEN, ["relay"], () => "noted");
    const onA = await TestWorker.start(
      a!.url,
      WORKER_TOKEN,
      ["main"],
      acting("A", () => gate),
    );
    const opB = await operator(b!);
    const key = "agent:main:cron:stale";
    await opB.call("sessions.create", { key });
    await opB.call("sessions.create", { key: TARGET });
    const opA = await operator(a!);
    const { runId } = await opA.call<{ runId: string }>("chat.send", { sessionKey: key, message: "m1" });
    await until(() => calls["A started"], "the run on A's worker");
    const onB = await TestWorker.start(
      b!.url,
      WORKER_TOKEN,
      ["main"],
      acting("B", async () => undefined),
    );
    a!.process.kill("SIGSTOP");
    await sleep(7_000);
    a!.process.kill("SIGCONT");
    // A renews its lease, learns it was lost, and lets its runs go; then its worker acts.
    await until(() => calls.B, "the reassigned run on B", 10_000);
    await sleep(3_000);
    release();
    await until(() => calls.A, "A's late tool call", 10_000);
    expect(calls.A).toMatchObject({ refused: expect.any(String) });
    expect(await opB.call<WaitAnswer>("agent.wait", { runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "B done",
    });
    const target = JSON.stringify(await opB.call("sessions.history", { sessionKey: TARGET }));
    expect(target).toContain("side effect from B");
    expect(target).not.toContain("side effect from A");
    for (const worker of [relay, onA, onB]) worker.close();
  }, 60_000);

  // Until session 23 `/healthz` checked the store's pool only: an instance whose lease renewals
  // failed answered 200 until the cluster declared it lost and took its runs away.
  it("answers /healthz 503 naming the lease while its renewals fail, and 200 once they go through", async () => {
    const {
      schema,
      instances: [a],
    } = await startCluster(1);
    const healthz = async () => {
      const response = await fetch(`${a!.url.replace(/^ws/, "http")}/healthz`);
      return { status: response.status, body: (await response.json()) as { degraded?: string[] } };
    };
    expect((await healthz()).status).toBe(200);
    await adminQuery(
      `CREATE FUNCTION "${schema}".refuse_renewal() RETURNS trigger LANGUAGE plpgsql AS $body$
       BEGIN RAISE EXCEPTION 'test: the database refuses this renewal'; END $body$;
       CREATE TRIGGER refuse_renewal BEFORE UPDATE ON "${schema}".cluster_instances
         FOR EACH ROW EXECUTE FUNCTION "${schema}".refuse_renewal();`,
    );
    const degraded = await until(
      async () => {
        const answer = await healthz();
        return answer.status === 503 && answer;
      },
      "a 503 from /healthz",
      10_000,
    );
    expect(degraded.body.degraded?.join("\n")).toMatch(
      /^lease: lease not renewed for \d+ ms \(of 4000\): .*refuses this renewal/m,
    );
    await adminQuery(`DROP TRIGGER refuse_renewal ON "${schema}".cluster_instances`);
    await until(async () => (await healthz()).status === 200, "a 200 from /healthz again", 10_000);
  }, 30_000);
});
