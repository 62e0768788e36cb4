import { describe, expect, it } from "vitest";
import { SwitchboardClient } from "./client";
import { FakeGateway } from "./testing/fake-gateway";
import { untilState, useFakeGateway } from "./testing/fixtures";

const fixture = useFakeGateway();

/** A ws:// URL nothing listens on (a gateway started and closed again). */
async function deadUrl(): Promise<string> {
  const gone = await FakeGateway.start();
  const url = gone.url;
  await gone.close();
  return url;
}

describe("several gateway URLs", () => {
  it("connects to the next URL when the first cannot be reached", async () => {
    const dead = await deadUrl();
    const client = await fixture.connect("operator", { url: [dead, fixture.gateway.url] });
    expect(client.url).toBe(fixture.gateway.url);
    await expect(client.agents.list()).resolves.toEqual({ agents: [] });
  });

  it("fails over to another instance when its gateway goes away, and keeps working", async () => {
    const other = await FakeGateway.start();
    try {
      const client = await fixture.connect("operator", { url: [fixture.gateway.url, other.url] });
      expect(client.url).toBe(fixture.gateway.url);
      await fixture.gateway.close();
      await untilState(client, "reconnecting");
      await client.ready();
      expect(client.url).toBe(other.url);
      expect(other.handshakes).toBe(1);
      await expect(client.agents.list()).resolves.toEqual({ agents: [] });
    } finally {
      await other.close();
    }
  });

  it("with failFast, gives up only once every URL has failed", async () => {
    const urls = [await deadUrl(), await deadUrl()];
    const client = fixture.track(
      new SwitchboardClient(fixture.options("operator", { url: urls }), { failFast: true }),
    );
    await expect(client.ready()).rejects.toMatchObject({ code: "UNAVAILABLE" });
    expect(client.state).toBe("closed");
  });

  it("refuses an empty list or a bad URL in it, naming the field", () => {
    expect(() => new SwitchboardClient(fixture.options("operator", { url: [] }))).toThrow(/url/);
    expect(() => new SwitchboardClient(fixture.options("operator", { url: ["http://x"] }))).toThrow(
      /url.*ws:\/\//,
    );
  });
});
