import { randomUUID } from "node:crypto";
import { isSwitchboardError } from "@switchboard/core";
import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { adminQuery, describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { openPostgresStore, type PostgresStore } from "./pg-store";
import { closedPort, TcpProxy } from "./tcp-proxy";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function openOn(url: string, extra: Partial<Parameters<typeof openPostgresStore>[0]> = {}) {
  const schema = testSchemaName();
  cleanups.push(() => dropSchema(schema));
  const store = await openPostgresStore({ url, schema, pool: { max: 3 }, connectTimeoutMs: 1000, ...extra });
  cleanups.push(() => store.close());
  return store;
}

/** Resolves to "ok" or the error code, so a fault can be asserted without racing the pool. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (error) {
    if (!isSwitchboardError(error)) throw error;
    return error.code;
  }
}

const target = new URL(TEST_PG_URL);

await describeWithPg("PostgreSQL store faults", () => {
  describe("server unreachable", () => {
    it("fails to open with UNAVAILABLE naming where, without the password", async () => {
      const port = await closedPort();
      const url = new URL(TEST_PG_URL);
      url.port = String(port);
      url.password = "pw-not-in-errors";
      const refused = openPostgresStore({
        url: url.toString(),
        schema: "never_created",
        connectTimeoutMs: 1000,
      });
      await expect(refused).rejects.toMatchObject({ code: "UNAVAILABLE", retryable: true });
      await refused.catch((error: Error) => {
        expect(error.message).toContain(`127.0.0.1:${port}/`);
        expect(error.message).toMatch(/ECONNREFUSED/);
        expect(error.message).not.toContain("pw-not-in-errors");
      });
    });

    it("answers UNAVAILABLE while the database is away, loses nothing acknowledged, and recovers by itself", async () => {
      const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
      await proxy.start();
      cleanups.push(() => proxy.stop());
      const store: PostgresStore = await openOn(proxy.urlFor(TEST_PG_URL));
      const row = sampleSession();
      await store.sessions.put(row);
      await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
      const acked = await store.transcripts.append(row.sessionId, [sampleMessage("before the outage")]);

      await proxy.stop();
      const during = await Promise.all([
        outcome(store.sessions.get(row.key)),
        outcome(store.transcripts.append(row.sessionId, [sampleMessage("during the outage")])),
        outcome(store.meta.set("k", "v")),
        outcome(store.sessions.list({ limit: 5 })),
      ]);
      expect(during).toEqual(["UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE"]);
      const failure = await store.sessions.get(row.key).catch((error: Error) => error);
      expect((failure as Error).message).toMatch(/PostgreSQL at 127\.0\.0\.1:\d+\/\S+ is unavailable/);
      const health = await store.health();
      expect(health.ok).toBe(false);
      expect(health.degraded?.database?.cause).toBeTruthy();

      await proxy.start();
      // No reopen: the pool connects again on the next request.
      expect(await store.sessions.get(row.key)).toEqual(row);
      expect(await store.health()).toEqual({ ok: true });
      const read = await store.transcripts.read(row.sessionId, { limit: 10 });
      expect(read.entries.map((entry) => entry.id)).toEqual(acked.map((entry) => entry.id));
      const after = await store.transcripts.append(row.sessionId, [sampleMessage("after")]);
      expect(after[0]!.seq).toBe(2);
    });
  });

  describe("a statement that cannot finish", () => {
    it("gives up after statementTimeoutMs with UNAVAILABLE and works again once the blocker is gone", async () => {
      const store = await openOn(TEST_PG_URL, { statementTimeoutMs: 200 });
      const sessionId = randomUUID();
      await store.transcripts.create({ sessionId, key: "agent:main:blocked", createdAt: 1 });
      await store.transcripts.append(sessionId, [sampleMessage("one")]);
      // Another session holds the transcript's row lock, as a stuck writer would.
      const blocker = new pg.Client({ connectionString: TEST_PG_URL });
      await blocker.connect();
      cleanups.push(() => blocker.end());
      await blocker.query("BEGIN");
      await blocker.query(`SELECT 1 FROM "${store.schema}".transcripts WHERE session_id = $1 FOR UPDATE`, [
        sessionId,
      ]);
      const started = Date.now();
      const stuck = await store.transcripts
        .append(sessionId, [sampleMessage("two")])
        .catch((error: Error) => error);
      expect(stuck).toMatchObject({ code: "UNAVAILABLE", message: expect.stringMatching(/timed out/) });
      expect(Date.now() - started).toBeLessThan(5_000);
      await blocker.query("ROLLBACK");
      const next = await store.transcripts.append(sessionId, [sampleMessage("three")]);
      expect(next[0]!.seq).toBe(2);
    });
  });

  describe("connections terminated by the server", () => {
    it("turns pg_terminate_backend mid-use into UNAVAILABLE or success, keeps seqs dense and every acknowledged entry", async () => {
      const applicationName = `sbtest_${randomUUID().slice(0, 8)}`;
      const store = await openOn(TEST_PG_URL, { applicationName, pool: { max: 4 } });
      const sessionId = randomUUID();
      await store.transcripts.create({ sessionId, key: "agent:main:faults", createdAt: 1 });
      let killed = 0;
      const terminate = async () => {
        const result = await adminQuery<{ killed: boolean }>(
          "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = $1",
          [applicationName],
        );
        killed += result.rows.filter((row) => row.killed).length;
      };

      const acknowledged: string[] = [];
      const outcomes: string[] = [];
      const writer = async (worker: number) => {
        for (let i = 0; i < 25; i++) {
          try {
            const [entry] = await store.transcripts.append(sessionId, [sampleMessage(`w${worker}-${i}`)]);
            acknowledged.push(entry!.id);
            outcomes.push("ok");
          } catch (error) {
            outcomes.push(isSwitchboardError(error) ? error.code : String(error));
          }
        }
      };
      const killer = async () => {
        for (let round = 0; round < 5; round++) {
          await new Promise((resolve) => setTimeout(resolve, 15));
          await terminate();
        }
      };
      await Promise.all([writer(1), writer(2), writer(3), killer()]);

      expect(killed).toBeGreaterThan(0);
      expect(outcomes.filter((code) => code !== "ok" && code !== "UNAVAILABLE")).toEqual([]);
      // After the terminations the store works without a reopen.
      await store.transcripts.append(sessionId, [sampleMessage("after")]);
      const all = await store.transcripts.read(sessionId, { limit: 1000 });
      const seqs = all.entries.map((entry) => entry.seq);
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
      expect(await store.transcripts.lastSeq(sessionId)).toBe(seqs.length);
      const stored = new Set(all.entries.map((entry) => entry.id));
      for (const id of acknowledged) expect(stored.has(id)).toBe(true);
      // An idle pool whose connections were all killed still answers reads (one retry, new connection).
      await terminate();
      expect(await store.transcripts.lastSeq(sessionId)).toBe(seqs.length);
    });
  });
});
