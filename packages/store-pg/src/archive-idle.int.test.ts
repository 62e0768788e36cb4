import { isSwitchboardError } from "@switchboard/core";
import { sampleRun, sampleSession } from "@switchboard/core/testing";
import pg from "pg";
import { afterEach, expect, it } from "vitest";
import { describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { openPostgresStore, type PostgresStore } from "./pg-store";

// An archive and a new run of the same session on two instances at once: exactly one of them may
// happen (docs/cluster.md). Each race is staged with a third connection holding the lock the other
// side takes, so the losing side is certainly in flight when the winner commits.

let opened: PostgresStore[] = [];
let clients: pg.Client[] = [];
let schema: string | undefined;
afterEach(async () => {
  for (const client of clients) await client.end().catch(() => undefined);
  for (const store of opened) await store.close();
  if (schema) await dropSchema(schema);
  opened = [];
  clients = [];
  schema = undefined;
});

/** Two stores on one schema: two gateway instances' views of it. */
async function twoInstances(): Promise<[PostgresStore, PostgresStore]> {
  schema = testSchemaName();
  for (let i = 0; i < 2; i++)
    opened.push(await openPostgresStore({ url: TEST_PG_URL, schema, pool: { max: 4 } }));
  return [opened[0]!, opened[1]!];
}

async function rawClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: TEST_PG_URL });
  await client.connect();
  clients.push(client);
  return client;
}

/** Resolves once a backend waits for a lock (the statement under test is blocked, in flight). */
async function someoneWaitsForALock(observer: pg.Client): Promise<void> {
  for (let tries = 0; tries < 200; tries++) {
    const found = await observer.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
    );
    if (found.rows[0].n > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("no statement ever waited for the lock");
}

const finished = (key: string) => ({ key, spawnedBy: "agent:main:main", spawnDepth: 1 });

await describeWithPg("PostgreSQL store: archiving an idle session against new runs, across instances", () => {
  it("archives an idle row once; refuses a reset, archived or missing row and leaves it as it was", async () => {
    const [a] = await twoInstances();
    const row = sampleSession(finished("agent:main:subagent:idle"));
    await a.sessions.put(row);
    expect(await a.archiveIdleSession(row.key, { sessionId: crypto.randomUUID(), at: 5 })).toBeUndefined();
    expect(
      await a.archiveIdleSession("agent:main:subagent:none", { sessionId: row.sessionId, at: 5 }),
    ).toBeUndefined();
    const at = row.updatedAt + 10;
    const archived = await a.archiveIdleSession(row.key, { sessionId: row.sessionId, at });
    expect(archived).toMatchObject({ key: row.key, archivedAt: at, updatedAt: at });
    expect(await a.sessions.get(row.key)).toEqual(archived);
    expect(await a.archiveIdleSession(row.key, { sessionId: row.sessionId, at: at + 1 })).toBeUndefined();
    expect((await a.sessions.get(row.key))?.archivedAt).toBe(at);
  });

  it("keeps the session live when a run insert on another instance is in flight as the archive starts", async () => {
    const [a, b] = await twoInstances();
    const row = sampleSession(finished("agent:main:subagent:racing-run"));
    await a.sessions.put(row);
    // An insert of instance B in flight: its transaction holds the row FOR KEY SHARE and has written
    // its run, not yet committed (what runs.put's statement does, held open here).
    const inserter = await rawClient();
    await inserter.query("BEGIN");
    await inserter.query(`SELECT 1 FROM "${schema}".sessions WHERE key = $1 FOR KEY SHARE`, [row.key]);
    const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId });
    await inserter.query(
      `INSERT INTO "${schema}".runs (run_id, session_key, status, created_at, pending_announce, row, version)
       VALUES ($1, $2, 'queued', 1, false, $3, 1)`,
      [run.runId, row.key, JSON.stringify(run)],
    );
    const archiving = a.archiveIdleSession(row.key, { sessionId: row.sessionId, at: Date.now() });
    await someoneWaitsForALock(await rawClient());
    await inserter.query("COMMIT");
    // The archive waited for the insert and then saw its run.
    expect(await archiving).toBeUndefined();
    expect((await b.sessions.get(row.key))?.archivedAt).toBeUndefined();
    // Once the run has ended, the session is idle again.
    await b.runs.put({ ...run, status: "ok", endedAt: 2 });
    expect(await a.archiveIdleSession(row.key, { sessionId: row.sessionId, at: Date.now() })).toBeDefined();
  });

  it("refuses a new run on another instance while the archive is in flight, once it committed", async () => {
    const [a, b] = await twoInstances();
    const row = sampleSession(finished("agent:main:subagent:racing-archive"));
    await a.sessions.put(row);
    // Instance A's archive in flight: the row locked FOR UPDATE and marked, not yet committed.
    const archiver = await rawClient();
    await archiver.query("BEGIN");
    await archiver.query(`SELECT 1 FROM "${schema}".sessions WHERE key = $1 FOR UPDATE`, [row.key]);
    await archiver.query(`UPDATE "${schema}".sessions SET archived_at = 7 WHERE key = $1`, [row.key]);
    const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId });
    const inserting = b.runs.put(run, { expectedVersion: 0 }).then(
      () => "inserted",
      (error: unknown) => error,
    );
    await someoneWaitsForALock(await rawClient());
    await archiver.query("COMMIT");
    const outcome = await inserting;
    expect(isSwitchboardError(outcome) && outcome.code).toBe("NOT_FOUND");
    expect((outcome as Error).message).toContain(`${row.key} (archived)`);
    expect(await b.runs.get(run.runId)).toBeUndefined();
  });

  it("lets exactly one of an archive and a new run through when many race freely", async () => {
    const [a, b] = await twoInstances();
    const rows = Array.from({ length: 40 }, (_, i) =>
      sampleSession(finished(`agent:main:subagent:free-${i}`)),
    );
    for (const row of rows) await a.sessions.put(row);
    const outcomes = await Promise.all(
      rows.map(async (row) => {
        const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId });
        const [archived, inserted] = await Promise.all([
          a.archiveIdleSession(row.key, { sessionId: row.sessionId, at: Date.now() }),
          b.runs.put(run, { expectedVersion: 0 }).then(
            () => true,
            (error: unknown) => {
              if (isSwitchboardError(error) && error.code === "NOT_FOUND") return false;
              throw error;
            },
          ),
        ]);
        return {
          archived: archived !== undefined,
          inserted,
          stored: (await a.runs.get(run.runId)) !== undefined,
        };
      }),
    );
    for (const outcome of outcomes) {
      expect(outcome.archived !== outcome.inserted).toBe(true);
      expect(outcome.stored).toBe(outcome.inserted);
    }
  });

  it("still updates and ends a run whose session was archived (only a new run is refused)", async () => {
    const [a] = await twoInstances();
    const row = sampleSession(finished("agent:main:subagent:ended"));
    await a.sessions.put(row);
    const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId, status: "ok", endedAt: 3 });
    await a.runs.put(run, { expectedVersion: 0 });
    expect(await a.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 9 })).toBeDefined();
    await a.runs.put({ ...run, error: "noted later" });
    expect((await a.runs.get(run.runId))?.error).toBe("noted later");
  });
});
