// A client resuming from a cursor the gateway can no longer replay from is told so (`missed` in the
// `events.subscribe` answer, `onEventsMissed` in the SDK), instead of silently skipping events.
import type { ClientOptions, MissedEvents } from "@switchboard/client";
import { describe, expect, it } from "vitest";
import { controlledSockets } from "./testing/controlled-sockets";
import { perTestSdkGateway } from "./testing/sdk-gateway";
import { type TestGateway, testStoreKind } from "./testing/test-gateway";
import { until, untilState } from "./testing/until";

const STORE = testStoreKind();
/** Above the in-process bus's window (16 384 events). */
const OVERFLOW = 17_000;

const sdk = perTestSdkGateway();
const operator = (options: Partial<ClientOptions> = {}) => sdk.open(options);

/** Pushes events the client's cursor points before out of reach: past the window, or pruned. */
async function loseEventsAfter(gateway: TestGateway, cursor: number): Promise<void> {
  const { bus, cluster } = gateway.gateway;
  if (!cluster) {
    for (let i = 0; i < OVERFLOW; i++)
      bus.publish("session.updated", { key: `agent:main:flood:${i}`, sessionId: "s", reason: "flood" });
    return;
  }
  for (let i = 0; i < 5; i++)
    bus.publish("session.updated", { key: `agent:main:flood:${i}`, sessionId: "s", reason: "flood" });
  await until(() => bus.currentSeq >= cursor + 5, "the flood read back");
  // Retention keeps the newest event only: everything after the cursor but that one is gone.
  await cluster.events.prune({ keep: 1 });
}

describe("events a resuming client can no longer get", () => {
  it("a client renewing its subscription past the replay window hears what it missed, then gets the rest", async () => {
    const gw = await sdk.start({}, { store: STORE });
    const control = controlledSockets();
    const op = await operator({ WebSocket: control.WebSocket });
    const missed: MissedEvents[] = [];
    op.onEventsMissed((gap) => void missed.push(gap));
    const keys: string[] = [];
    op.on("session.updated", (event) => void keys.push(event.payload.key));
    await op.subscribe({});
    await op.sessions.create({ key: "agent:main:cron:seen" });
    await until(() => keys.includes("agent:main:cron:seen"), "the first event");
    const cursor = op.lastEventSeq!;

    // Away while the events after its cursor leave the window.
    control.blocked = true;
    control.drop();
    await untilState(op, "reconnecting");
    await loseEventsAfter(gw, cursor);
    control.blocked = false;
    await untilState(op, "open");

    await until(() => missed.length > 0, "the missed-events notice");
    expect(missed).toHaveLength(1);
    expect(missed[0]!.after).toBe(cursor);
    expect(missed[0]!.before).toBeGreaterThan(cursor + 1);
    // What the window still held was replayed, and the stream goes on live.
    await op.sessions.create({ key: "agent:main:cron:after" });
    await until(() => keys.includes("agent:main:cron:after"), "a live event after the renewal");
    expect(keys.filter((key) => key.startsWith("agent:main:flood:")).length).toBeGreaterThan(0);
    expect(keys).not.toContain("agent:main:flood:0");
  }, 30_000);

  it("answers `missed` to a subscribe from an old cursor, and nothing for a cursor the window still covers", async () => {
    const gw = await sdk.start({}, { store: STORE });
    const op = await operator();
    await op.sessions.create({ key: "agent:main:cron:one" });
    const start = (await op.subscribe({})).seq;
    const covered = await op.subscribe({ after: start });
    expect(covered.missed).toBeUndefined();
    // A fresh gateway numbers from the clock (or its cluster's sequence), but lost nothing below.
    expect((await op.subscribe({ after: 0 })).missed).toBeUndefined();

    await loseEventsAfter(gw, start);
    const late = await operator();
    const answer = await late.subscribe({ after: start });
    expect(answer.missed?.after).toBe(start);
    expect(answer.missed!.before).toBeGreaterThan(start + 1);
    expect(answer.missed!.before).toBeLessThanOrEqual(answer.seq);
  }, 30_000);

  it("answers `missed` when a connection adds a session from a cursor below events it was already sent", async () => {
    await sdk.start({}, { store: STORE });
    const op = await operator();
    const a = "agent:main:cron:a";
    const b = "agent:main:cron:b";
    await op.sessions.create({ key: a });
    const keys: string[] = [];
    const seen: string[] = [];
    op.on("session.updated", (event) => {
      keys.push(event.payload.key);
      seen.push(`${event.payload.key} ${event.payload.reason}`);
    });
    const start = (await op.subscribe({ sessionKey: a })).seq;
    await op.sessions.create({ key: b });
    await op.sessions.patch({ key: a, label: "later" });
    // The patch's event, not a's creation (on PostgreSQL the reader can still be short of it when
    // the subscription starts, and then it comes live too).
    await until(() => seen.includes(`${a} patched`), "a's event after b's");
    const cursor = op.lastEventSeq!;

    // b's event lies between `start` and what this connection has had: it cannot come in order.
    const answer = await op.subscribe({ sessionKey: b, after: start });
    expect(answer.missed?.after).toBe(start);
    expect(answer.missed!.before).toBeGreaterThan(start + 1);
    expect(answer.missed!.before).toBeLessThanOrEqual(cursor);
    expect(keys).not.toContain(b);
    // From a cursor at or past b's event nothing is missed, and b's later events arrive.
    expect((await op.subscribe({ sessionKey: b, after: cursor })).missed).toBeUndefined();
    await op.sessions.patch({ key: b, label: "seen" });
    await until(() => keys.includes(b), "b's live event");
  }, 30_000);

  it("after a graceful restart, resuming from the last event seen before it reports nothing missed", async () => {
    const gw = await sdk.start({}, { store: STORE });
    const op = await operator();
    const keys: string[] = [];
    op.on("session.updated", (event) => void keys.push(event.payload.key));
    await op.subscribe({});
    await op.sessions.create({ key: "agent:main:cron:before" });
    await until(() => keys.includes("agent:main:cron:before"), "the event before the restart");
    const cursor = op.lastEventSeq!;
    await op.close();

    // A restarted single gateway numbers far above the old one and its window starts empty: the stop
    // it recorded says nothing was skipped. (A cluster's log outlives its instances.)
    await gw.restart();
    const again = await operator();
    const answer = await again.subscribe({ after: cursor });
    if (!gw.gateway.cluster) expect(answer.seq).toBeGreaterThan(cursor);
    expect(answer.missed).toBeUndefined();
  }, 30_000);
});
