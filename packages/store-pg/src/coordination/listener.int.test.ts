import { randomUUID } from "node:crypto";
import { expect, it } from "vitest";
import { adminQuery, describeWithPg } from "../../test/pg-harness";
import { listenerApplicationName } from "./context";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

/** An instance with an application name of its own, so its connections can be counted and killed. */
async function instance() {
  const applicationName = `sb-listen-${randomUUID().slice(0, 8)}`;
  const coordination = await cluster.open({ applicationName });
  return { coordination, listenerName: listenerApplicationName(applicationName) };
}

/** Server processes of the listener connection named `name`. */
async function connections(name: string): Promise<number> {
  const found = await adminQuery<{ count: string }>(
    "SELECT count(*) AS count FROM pg_stat_activity WHERE application_name = $1",
    [name],
  );
  return Number(found.rows[0]!.count);
}

function recorder() {
  const payloads: string[] = [];
  let connected = 0;
  return {
    payloads,
    get connected() {
      return connected;
    },
    handlers: {
      notify: (payload: string) => payloads.push(payload),
      connected: () => {
        connected += 1;
      },
    },
  };
}

const channelOf = () => `sb_test_${randomUUID().replaceAll("-", "").slice(0, 16)}`;

const notify = (channel: string, payload: string) =>
  adminQuery("SELECT pg_notify($1, $2)", [channel, payload]);

await describeWithPg("listener connection", () => {
  it("listens on every channel of an instance over one connection", async () => {
    const { coordination, listenerName } = await instance();
    const [one, two] = [channelOf(), channelOf()];
    const a = recorder();
    const b = recorder();
    await coordination.listener.listen(one, a.handlers);
    await coordination.listener.listen(two, b.handlers);
    expect(coordination.listener.listening(one)).toBe(true);
    expect(coordination.listener.listening(two)).toBe(true);
    expect(await connections(listenerName)).toBe(1);
    // Each component was told once that its channel is listened to (its first catch-up).
    expect([a.connected, b.connected]).toEqual([1, 1]);

    await notify(one, "for one");
    await notify(two, "for two");
    await notify(channelOf(), "for nobody here");
    await eventually(() => a.payloads.length === 1 && b.payloads.length === 1, 3000, "both notifications");
    expect(a.payloads).toEqual(["for one"]);
    expect(b.payloads).toEqual(["for two"]);
    await expect(coordination.listener.listen(one, a.handlers)).rejects.toThrow("listened to already");
  });

  it("re-opens a killed connection, listens on every channel again and tells each to catch up", async () => {
    const { coordination, listenerName } = await instance();
    const [one, two] = [channelOf(), channelOf()];
    const a = recorder();
    const b = recorder();
    await coordination.listener.listen(one, a.handlers, { reconnectMs: 50 });
    await coordination.listener.listen(two, b.handlers);
    expect(coordination.listener.downSince()).toBeUndefined();
    const killed = await adminQuery(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
      [listenerName],
    );
    expect(killed.rowCount).toBe(1);
    await eventually(() => !coordination.listener.listening(one), 3000, "the loss noticed");
    // What /healthz reads (past a grace): since when the channels have gone unheard.
    expect(coordination.listener.downSince()).toBeGreaterThan(Date.now() - 3000);
    // Sent while no one listened: lost, which is what `connected` is for.
    await notify(one, "lost");
    await eventually(() => a.connected === 2 && b.connected === 2, 5000, "both channels listened to again");
    expect(coordination.listener.listening(two)).toBe(true);
    expect(coordination.listener.downSince()).toBeUndefined();
    expect(await connections(listenerName)).toBe(1);
    await notify(one, "after");
    await notify(two, "after");
    await eventually(
      () => a.payloads.includes("after") && b.payloads.includes("after"),
      3000,
      "wake-ups again",
    );
    expect(a.payloads).toEqual(["after"]);
  });

  it("gives its connection back while no channel is listened to", async () => {
    const { coordination, listenerName } = await instance();
    const [one, two] = [channelOf(), channelOf()];
    const a = recorder();
    const stopOne = await coordination.listener.listen(one, a.handlers);
    const stopTwo = await coordination.listener.listen(two, recorder().handlers);
    await stopOne();
    expect(coordination.listener.listening(one)).toBe(false);
    expect(coordination.listener.channels()).toEqual([two]);
    await notify(one, "not heard");
    expect(await connections(listenerName)).toBe(1);
    await stopTwo();
    await eventually(async () => (await connections(listenerName)) === 0, 3000, "the connection ended");
    // No channel asked for is none missed.
    expect(coordination.listener.downSince()).toBeUndefined();
    // And opens one again for the next channel.
    await coordination.listener.listen(one, a.handlers);
    expect(await connections(listenerName)).toBe(1);
    await notify(one, "heard");
    await eventually(() => a.payloads.length === 1, 3000, "the notification");
    expect(a.payloads).toEqual(["heard"]);
  });
});
