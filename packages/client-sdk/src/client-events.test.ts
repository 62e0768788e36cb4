import { describe, expect, it } from "vitest";
import type { SwitchboardClient, TypedEvent } from "./client";
import { FakeGateway } from "./testing/fake-gateway";
import { deferred, until, untilState, useFakeGateway } from "./testing/fixtures";

const SESSION = "agent:alpha:main";

function emitUpdate(gateway: FakeGateway, reason: string, key = SESSION): number {
  return gateway.emit("session.updated", { key, sessionId: "s-1", reason });
}

/** Collects delivered `session.updated` reasons until `count` have arrived. */
function collect(client: SwitchboardClient) {
  const seen: Array<{ seq: number; reason: string }> = [];
  const waiters: Array<{ count: number; resolve: () => void }> = [];
  client.on("session.updated", (event) => {
    seen.push({ seq: event.seq, reason: event.payload.reason });
    for (const waiter of waiters.filter((candidate) => seen.length >= candidate.count)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
  });
  return {
    seen,
    until: (count: number) =>
      seen.length >= count
        ? Promise.resolve()
        : new Promise<void>((resolve) => waiters.push({ count, resolve })),
  };
}

describe("events", () => {
  const fixture = useFakeGateway();

  it("delivers typed events to listeners and iterators after subscribe", async () => {
    const client = await fixture.connect("operator");
    const ended: Array<TypedEvent<"run.ended">> = [];
    const stop = client.on("run.ended", (event) => ended.push(event));
    const iterator = client.events({ events: ["run.ended", "session.taint"] });

    const subscribed = await client.subscribe();
    expect(subscribed).toEqual({ subscribed: true, seq: 0 });
    fixture.gateway.emit("session.taint", {
      key: SESSION,
      from: "PUBLIC",
      to: "CONFIDENTIAL",
      reason: "read",
    });
    fixture.gateway.emit("run.ended", { runId: "r1", sessionKey: SESSION, status: "ok", reply: "done" });

    const first = await iterator.next();
    const second = await iterator.next();
    expect(first.value).toEqual({
      event: "session.taint",
      seq: 1,
      payload: { key: SESSION, from: "PUBLIC", to: "CONFIDENTIAL", reason: "read" },
    });
    expect(second.value).toMatchObject({ event: "run.ended", seq: 2, payload: { reply: "done" } });
    expect(ended.map((event) => event.payload.runId)).toEqual(["r1"]);
    expect(client.lastEventSeq).toBe(2);

    stop();
    fixture.gateway.emit("run.ended", { runId: "r2", sessionKey: SESSION, status: "error", error: "boom" });
    const third = await iterator.next();
    expect(third.value).toMatchObject({ payload: { runId: "r2" } });
    expect(ended).toHaveLength(1);
  });

  it("replays events after `after` on subscribe", async () => {
    const client = await fixture.connect("operator");
    for (const reason of ["a", "b", "c"]) emitUpdate(fixture.gateway, reason);
    const events = collect(client);
    await client.subscribe({ after: 1 });
    await events.until(2);
    expect(events.seen).toEqual([
      { seq: 2, reason: "b" },
      { seq: 3, reason: "c" },
    ]);
  });

  it("keeps going when a listener throws and drops malformed or unknown events", async () => {
    const client = await fixture.connect("operator");
    client.on("session.updated", () => {
      throw new Error("listener bug");
    });
    const events = collect(client);
    await client.subscribe();
    fixture.gateway.sendRaw(
      JSON.stringify({ type: "event", event: "session.updated", seq: 1, payload: { key: 5 } }),
    );
    fixture.gateway.sendRaw(JSON.stringify({ type: "event", event: "future.thing", seq: 2, payload: {} }));
    fixture.gateway.sendRaw(
      JSON.stringify({
        type: "event",
        event: "session.updated",
        seq: 3,
        payload: { key: SESSION, sessionId: "s", reason: "ok" },
      }),
    );
    await events.until(1);
    expect(events.seen).toEqual([{ seq: 3, reason: "ok" }]);
    expect(client.state).toBe("open");
  });

  it("ends iterators when the client closes, and `break` detaches an iterator", async () => {
    const client = await fixture.connect("operator");
    await client.subscribe();
    const received: number[] = [];
    const first = deferred();
    const consumed = (async () => {
      for await (const event of client.events()) {
        received.push(event.seq);
        first.resolve();
      }
    })();
    const breaking = (async () => {
      for await (const _event of client.events()) break;
    })();
    emitUpdate(fixture.gateway, "one");
    await breaking;
    await first.promise;
    await client.close();
    await consumed;
    expect(received).toEqual([1]);
  });

  it.each(["after-response", "before-response"] as const)(
    "resumes after a dropped connection without losing or repeating events (replay %s)",
    async (replay) => {
      const gateway = await FakeGateway.start({ replay });
      try {
        const client = fixture.track(
          fixture.client("client", { url: gateway.url, sessionKey: SESSION }, { failFast: true }),
        );
        const events = collect(client);
        const iterated: number[] = [];
        const iterating = (async () => {
          for await (const event of client.events()) iterated.push(event.seq);
        })();
        await client.ready();
        await client.subscribe({ sessionKey: SESSION });

        for (const reason of ["1", "2", "3"]) emitUpdate(gateway, reason);
        emitUpdate(gateway, "other session", "agent:beta:main");
        await events.until(3);

        gateway.dropConnections();
        // Emitted while the client is away: only the replay can bring them.
        for (const reason of ["4", "5", "6"]) emitUpdate(gateway, reason);
        await untilState(client, "reconnecting");
        await client.ready();
        emitUpdate(gateway, "7");
        await events.until(7);

        // The gateway misbehaving with an overlapping replay must not produce duplicates either.
        gateway.sendRaw(
          JSON.stringify({
            type: "event",
            event: "session.updated",
            seq: 2,
            payload: { key: SESSION, sessionId: "s-1", reason: "2" },
          }),
        );
        emitUpdate(gateway, "8");
        await events.until(8);

        expect(events.seen.map((event) => event.reason)).toEqual(["1", "2", "3", "4", "5", "6", "7", "8"]);
        const seqs = events.seen.map((event) => event.seq);
        expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
        const resubscribe = gateway.requestsFor("events.subscribe")[1];
        expect(resubscribe?.params).toEqual({ sessionKey: SESSION, after: 3 });

        await client.close();
        await iterating;
        expect(iterated).toEqual(seqs);
      } finally {
        await gateway.close();
      }
    },
  );

  it("resumes a live subscription that saw no event yet from the seq it started at", async () => {
    const client = await fixture.connect("operator");
    emitUpdate(fixture.gateway, "before subscribing");
    const events = collect(client);
    await client.subscribe();
    fixture.gateway.dropConnections();
    emitUpdate(fixture.gateway, "while away");
    await untilState(client, "reconnecting");
    await client.ready();
    await events.until(1);
    expect(events.seen).toEqual([{ seq: 2, reason: "while away" }]);
    expect(fixture.gateway.requestsFor("events.subscribe")[1]?.params).toEqual({ after: 1 });
  });

  it("follows a gateway whose event sequence restarted instead of waiting for the old seq", async () => {
    const client = await fixture.connect("operator");
    const events = collect(client);
    await client.subscribe();
    for (const reason of ["a", "b", "c"]) emitUpdate(fixture.gateway, reason);
    await events.until(3);

    fixture.gateway.dropConnections();
    fixture.gateway.resetEventLog();
    await untilState(client, "reconnecting");
    await client.ready();
    emitUpdate(fixture.gateway, "after restart");
    await events.until(4);
    expect(events.seen.at(-1)).toEqual({ seq: 1, reason: "after restart" });
  });

  it("after a restart with a new epoch, replays what the new gateway published before the resubscribe", async () => {
    const client = await fixture.connect("operator");
    const events = collect(client);
    await client.subscribe();
    for (const reason of ["a", "b", "c"]) emitUpdate(fixture.gateway, reason);
    await events.until(3);

    fixture.gateway.dropConnections();
    fixture.gateway.resetEventLog({ newEpoch: true });
    // Published by the restarted gateway while the client was still away, under a lower seq.
    emitUpdate(fixture.gateway, "early in the new epoch");
    await untilState(client, "reconnecting");
    await client.ready();
    emitUpdate(fixture.gateway, "live");
    await events.until(5);
    expect(events.seen.slice(3)).toEqual([
      { seq: 1, reason: "early in the new epoch" },
      { seq: 2, reason: "live" },
    ]);
    expect(client.lastEventSeq).toBe(2);
  });

  it("resumes by the cluster's epoch: another instance of the same stream is not a new epoch", async () => {
    fixture.gateway.epoch = "cluster-stream-1";
    const client = await fixture.connect("operator");
    const events = collect(client);
    await client.subscribe();
    for (const reason of ["a", "b", "c"]) emitUpdate(fixture.gateway, reason);
    await events.until(3);

    fixture.gateway.dropConnections();
    // Another instance answers (its own instance id), same stream: nothing is replayed from the
    // start of a window, as it would be for a new epoch.
    fixture.gateway.resetEventLog({ newEpoch: true });
    emitUpdate(fixture.gateway, "not a new epoch");
    await untilState(client, "reconnecting");
    await client.ready();
    emitUpdate(fixture.gateway, "live");
    await events.until(4);
    expect(events.seen.slice(3)).toEqual([{ seq: 2, reason: "live" }]);
  });

  it("delivers run.assigned whatever its seq: it is addressed to the connection, not resumed", async () => {
    const worker = await fixture.connect("agent", { agents: ["alpha"] });
    const assigned: string[] = [];
    worker.on("run.assigned", (event) => assigned.push(event.payload.runId));
    await worker.subscribe();
    for (const reason of ["a", "b", "c"]) emitUpdate(fixture.gateway, reason, "agent:alpha:main");
    await until(() => worker.lastEventSeq === 3);
    // Numbering that went back (e.g. a gateway restarted without durable seqs), same connection.
    fixture.gateway.resetEventLog();
    const run = fixture.gateway.startRun("agent:alpha:main", "hello");
    await until(() => assigned.length === 1);
    expect(assigned).toEqual([run.runId]);
    // The addressed frame did not move the stream's cursor.
    expect(worker.lastEventSeq).toBe(3);
  });

  it("ends an iterator whose consumer falls too far behind with an error", async () => {
    const client = await fixture.connect("operator");
    await client.subscribe();
    const iterator = client.events({ highWaterMark: 2 });
    const events = collect(client);
    for (const reason of ["1", "2", "3"]) emitUpdate(fixture.gateway, reason);
    await events.until(3);
    // What was buffered is still delivered, then the error, then the end.
    await expect(iterator.next()).resolves.toMatchObject({ value: { seq: 1 } });
    await expect(iterator.next()).resolves.toMatchObject({ value: { seq: 2 } });
    await expect(iterator.next()).rejects.toThrow(/fell more than 2 events behind/);
    await expect(iterator.next()).resolves.toMatchObject({ done: true });
  });
});
