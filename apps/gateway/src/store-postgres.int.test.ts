import { adminQuery, pgUnavailableReason } from "@switchboard/store-pg/testing";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, TestWorker } from "./testing/test-gateway";

/**
 * One gateway on the PostgreSQL store (`store: { kind: "postgres" }`), end to end: what the gateway
 * keeps in the store's meta space (the event seq reservation, the audit head anchor) and the audit
 * chain must work there as on the file store. The whole gateway suite also runs on PostgreSQL with
 * SWITCHBOARD_TEST_STORE=postgres.
 */

const WORKER_TOKEN = "worker-token-0123456789";
const config = {
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
};

const unavailable = await pgUnavailableReason();
if (unavailable !== undefined && process.env.SWITCHBOARD_REQUIRE_PG !== "1")
  console.warn(
    `[store-postgres.int.test] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`,
  );

describe.skipIf(unavailable !== undefined && process.env.SWITCHBOARD_REQUIRE_PG !== "1")(
  "gateway on the PostgreSQL store",
  () => {
    let gw: TestGateway | undefined;
    afterEach(async () => {
      await gw?.close();
      gw = undefined;
    });

    const schemaOf = (gateway: TestGateway) => (gateway.gateway.config.store as { schema: string }).schema;

    it("runs, lists, reads history and keeps events and the audit chain across a restart", async () => {
      if (unavailable !== undefined)
        throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
      gw = await startTestGateway(config, { store: "postgres" });
      const schema = schemaOf(gw);
      const worker = await TestWorker.start(
        gw.url,
        WORKER_TOKEN,
        ["main"],
        (context) => `pong: ${context.run.input.message}`,
      );
      const op = await gw.operator();
      const { seq: before } = await op.call<{ seq: number }>("events.subscribe", {});
      const { runId } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: "main",
        message: "ping",
      });
      expect(await op.call("agent.wait", { runId })).toMatchObject({ status: "ok", reply: "pong: ping" });
      await op.call("sessions.create", { key: "agent:main:cron:nightly" });
      const listed = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", { limit: 10 });
      expect(listed.sessions.map((row) => row.key)).toEqual(
        expect.arrayContaining(["agent:main:main", "agent:main:cron:nightly"]),
      );
      // The rows are in the database, not in the data dir.
      const stored = await adminQuery<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".sessions`);
      expect(stored.rows[0]!.n).toBe(2);
      expect(await op.call("audit.verify", {})).toMatchObject({ ok: true });
      worker.close();

      await gw.restart();
      const again = await gw.operator();
      const history = await again.call<{
        messages: Array<{ role: string; content: Array<{ text?: string }> }>;
      }>("sessions.history", { sessionKey: "main" });
      expect(history.messages.map((m) => [m.role, m.content[0]?.text])).toEqual([
        ["user", "ping"],
        ["assistant", "pong: ping"],
      ]);
      // Event seqs go on past everything the first process handed out (reserved in the store's meta).
      const { seq: after } = await again.call<{ seq: number }>("events.subscribe", {});
      expect(after).toBeGreaterThan(before);
      await again.call("sessions.create", { key: "agent:main:cron:weekly" });
      const event = await again.waitForEvent((frame) => frame.event === "session.updated");
      expect(event.seq).toBeGreaterThan(after);
      expect(await again.call("audit.verify", {})).toMatchObject({ ok: true });
    });

    it("notices audit records removed from the database while the gateway was down", async () => {
      if (unavailable !== undefined)
        throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
      gw = await startTestGateway(config, { store: "postgres" });
      const schema = schemaOf(gw);
      const op = await gw.operator();
      for (const key of ["cron:a", "cron:b", "cron:c"]) await op.call("sessions.create", { key });
      expect(await op.call("audit.verify", {})).toMatchObject({ ok: true });
      await gw.restart(async () => {
        // A postgres store makes the gateway a cluster member: its records are in its own chain.
        await adminQuery(
          `DELETE FROM "${schema}".audit_chain_records WHERE (chain_id, idx) =
             (SELECT chain_id, idx FROM "${schema}".audit_chain_records ORDER BY at DESC, idx DESC LIMIT 1)`,
        );
      });
      const after = await gw.operator();
      const verdict = await after.call<{ ok: boolean; reason?: string }>("audit.verify", {});
      expect(verdict.ok).toBe(false);
      expect(verdict.reason).toContain("missing at the end");
    });

    it("claims a send's follow-up in the database only when it has a step to take", async () => {
      for (const turns of [0, 1]) {
        gw = await startTestGateway(
          { ...config, session: { agentToAgent: { maxPingPongTurns: turns } } },
          { store: "postgres" },
        );
        const schema = schemaOf(gw);
        let answer!: () => void;
        const answered = new Promise<void>((resolve) => {
          answer = resolve;
        });
        const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], async (context) => {
          if (context.run.input.message !== "ping") return "REPLY_SKIP";
          await answered;
          return "pong";
        });
        const op = await gw.operator();
        await op.call("sessions.create", { key: "agent:main:cron:asker" });
        await op.call("sessions.create", { key: "agent:main:cron:target" });
        const sent = await op.call<{ status: string; runId: string }>("tools.invoke", {
          tool: "sessions_send",
          args: { sessionKey: "agent:main:cron:target", message: "ping", timeoutSeconds: 0 },
          as: "agent:main:cron:asker",
        });
        expect(sent.status).toBe("accepted");
        const claims = async () =>
          (
            await adminQuery<{ kind: string; run_id: string }>(
              `SELECT kind, run_id FROM "${schema}".flow_claims`,
            )
          ).rows;
        // A cron target has no route and no announce to skip: only a reply turn is a step.
        expect(await claims()).toEqual(turns === 0 ? [] : [{ kind: "send", run_id: sent.runId }]);
        answer();
        expect(await op.call("agent.wait", { runId: sent.runId })).toMatchObject({
          status: "ok",
          reply: "pong",
        });
        // The reply turn (skipped by the worker) ends the follow-up, and its claim goes.
        for (let tries = 0; (await claims()).length > 0 && tries < 100; tries++)
          await new Promise((resolve) => setTimeout(resolve, 50));
        expect(await claims()).toEqual([]);
        expect(worker.runs.length).toBe(turns === 0 ? 1 : 2);
        worker.close();
        await gw.close();
        gw = undefined;
      }
    });
  },
);
