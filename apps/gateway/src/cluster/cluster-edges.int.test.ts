import type { ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  adminQuery,
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { type ChildGateway, startChildGateway } from "../testing/child-gateway";
import { TestWorker } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";

/**
 * Gateway instances on one PostgreSQL schema (the built gateway in child processes, as in
 * cluster.int.test.ts), off the usual paths: the database refusing what the instances write.
 */

const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(gatewayRoot, "test", "cluster-gateway.mjs");
const distEntry = join(gatewayRoot, "dist", "index.js");
const built = existsSync(distEntry) && readFileSync(distEntry, "utf8").includes("Gateway");
const unavailable = await pgUnavailableReason();
const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
if (unavailable !== undefined && !requirePg)
  console.warn(
    `[cluster-edges.int.test] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`,
  );
if (!built)
  console.warn(`[cluster-edges.int.test] skipped: ${distEntry} is missing; build the gateway first`);

const WORKER_TOKEN = "cluster-worker-token-0123456789";

const children = new Set<ChildProcess>();
let schemas: string[] = [];
afterAll(() => {
  for (const child of children) child.kill("SIGKILL");
});
afterEach(async () => {
  for (const child of children) {
    child.kill("SIGTERM");
    await new Promise((done) => child.once("exit", done));
  }
  for (const schema of schemas) await dropTestSchema(schema);
  schemas = [];
});

async function startCluster(count: number): Promise<{ schema: string; instances: ChildGateway[] }> {
  if (unavailable !== undefined)
    throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
  const schema = testSchemaName("sbgwedge");
  schemas.push(schema);
  const instances: ChildGateway[] = [];
  for (let i = 0; i < count; i++)
    instances.push(await startChildGateway(childScript, [testPgUrl(), schema, WORKER_TOKEN], children));
  return { schema, instances };
}

async function operator(gateway: ChildGateway): Promise<TestPeer> {
  return TestPeer.connect(gateway.url, { token: gateway.token, role: "operator" });
}

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

describe.skipIf((unavailable !== undefined && !requirePg) || !built)(
  "gateway instances on one database, off the usual paths",
  () => {
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
  },
);
