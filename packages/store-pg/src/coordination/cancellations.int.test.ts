import { type Logger, recordingLogger } from "@switchboard/core";
import pg from "pg";
import { expect, it } from "vitest";
import { adminQuery, describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import {
  type ClusterCancellationsOptions,
  cancellationChannel,
  openClusterCancellations,
} from "./cancellations";
import type { Coordination } from "./context";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function listening(coordination: Coordination, options?: ClusterCancellationsOptions) {
  const cancellations = openClusterCancellations(coordination, options);
  const heard: string[] = [];
  const stop = await cancellations.listen((key) => heard.push(key));
  cluster.cleanup(stop);
  return { cancellations, heard };
}

async function instance(name: string, options?: ClusterCancellationsOptions & { logger?: Logger }) {
  const { logger, ...rest } = options ?? {};
  return listening(await cluster.open({ instanceId: name, ...(logger ? { logger } : {}) }), rest);
}

/** The rows of calls in flight, per instance. */
async function rows(): Promise<Record<string, number>> {
  const found = await adminQuery<{ instance_id: string; n: number }>(
    `SELECT instance_id, count(*)::int AS n FROM "${cluster.schema}".cancellable_calls GROUP BY instance_id`,
  );
  return Object.fromEntries(found.rows.map((row) => [row.instance_id, row.n]));
}

/** Every NOTIFY on the schema's cancellation channel, heard by a connection of its own. */
async function notifications(): Promise<string[]> {
  const client = new pg.Client({ connectionString: TEST_PG_URL });
  await client.connect();
  cluster.cleanup(() => client.end());
  const payloads: string[] = [];
  client.on("notification", (message) => payloads.push(message.payload ?? ""));
  await client.query(`LISTEN ${cancellationChannel(cluster.schema)}`);
  return payloads;
}

const KEY = 'mcp\u0000token\u0000"7"';

await describeWithPg("cluster cancellations", () => {
  it("cancels the one call of a key: here, or by telling the instance that runs it, and only it", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const c = await instance("gw-c");
    const heard = await notifications();
    const end = a.cancellations.track(KEY);
    await eventually(async () => (await rows())["gw-a"] === 1, 5000, "the call's row");

    expect(await c.cancellations.cancel(KEY)).toBe("sent");
    await eventually(() => a.heard.length === 1);
    expect(a.heard).toEqual([KEY]);
    expect(await a.cancellations.cancel(KEY)).toBe("here");
    expect(b.heard).toEqual([]);
    expect(c.heard).toEqual([]);
    // One NOTIFY, addressed to A, carrying no key (only its hash).
    expect(heard).toHaveLength(1);
    expect(JSON.parse(heard[0]!)).toMatchObject({ to: "gw-a" });
    expect(heard[0]).not.toContain("token");

    end();
    await eventually(async () => (await rows())["gw-a"] === undefined, 5000, "the row removed");
    expect(await c.cancellations.cancel(KEY)).toBe("none");
    expect(await a.cancellations.cancel(KEY)).toBe("none");
  });

  it("cancels none when the key names calls on two instances, wherever the cancellation lands", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const c = await instance("gw-c");
    const heard = await notifications();
    const onA = a.cancellations.track(KEY);
    b.cancellations.track(KEY);
    await eventually(async () => {
      const found = await rows();
      return found["gw-a"] === 1 && found["gw-b"] === 1;
    });
    for (const at of [a, b, c]) expect(await at.cancellations.cancel(KEY)).toBe("ambiguous");
    // Two on one instance are ambiguous too, without a lookup.
    c.cancellations.track("twice");
    c.cancellations.track("twice");
    expect(await c.cancellations.cancel("twice")).toBe("ambiguous");
    // Once A's call ended, B's is the only one.
    onA();
    await eventually(async () => (await rows())["gw-a"] === undefined);
    expect(await c.cancellations.cancel(KEY)).toBe("sent");
    await eventually(() => b.heard.length === 1);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(heard).toHaveLength(1);
    expect(a.heard).toEqual([]);
    expect(c.heard).toEqual([]);
  });

  it("sends no NOTIFY for a key naming no call", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const heard = await notifications();
    b.cancellations.track("real");
    await eventually(async () => (await rows())["gw-b"] === 1);
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, n) => a.cancellations.cancel(`made-up-${n}`)),
    );
    expect(new Set(outcomes)).toEqual(new Set(["none"]));
    // The one cancellation naming a call is heard after the others: they sent nothing before it.
    expect(await a.cancellations.cancel("real")).toBe("sent");
    await eventually(() => heard.length === 1);
    expect(JSON.parse(heard[0]!)).toMatchObject({ to: "gw-b" });
  });

  it("bounds its lookups: the excess is dropped at once and logged once, not per drop", async () => {
    const { logger, entries } = recordingLogger();
    const a = await instance("gw-a", { logger, maxLookups: 1, maxWaiting: 3 });
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, (_, n) => a.cancellations.cancel(`flood-${n}`)),
    );
    expect(outcomes.filter((outcome) => outcome === "none")).toHaveLength(4);
    expect(outcomes.filter((outcome) => outcome === "dropped")).toHaveLength(46);
    const warnings = entries.filter((entry) => entry.message?.includes("dropped"));
    expect(warnings).toHaveLength(1);
    // Lookups go on once the queue has room again.
    expect(await a.cancellations.cancel("after")).toBe("none");
  });

  it("frees the calls of an instance lost, and a restarted instance's own stale calls", async () => {
    const lost = await cluster.member("gw-lost", 300);
    const alive = await cluster.member("gw-alive");
    const onLost = await listening(lost.coordination);
    const onAlive = await listening(alive.coordination);
    onLost.cancellations.track("lost-call");
    onAlive.cancellations.track("alive-call");
    await eventually(async () => {
      const found = await rows();
      return found["gw-lost"] === 1 && found["gw-alive"] === 1;
    });
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect((await alive.membership.sweep()).lostInstances).toEqual(["gw-lost"]);
    expect(await rows()).toEqual({ "gw-alive": 1 });

    // A process restarted with the same instance id (after kill -9) starts with none of its own.
    await cluster.member("gw-alive");
    expect(await rows()).toEqual({});
  });
});
