import { expect, it } from "vitest";
import { describeWithPg } from "../../test/pg-harness";
import { MAX_CANCELLATION_KEY_BYTES, openClusterCancellations } from "./cancellations";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function instance(name: string) {
  const coordination = await cluster.open({ instanceId: name });
  const cancellations = openClusterCancellations(coordination);
  const heard: string[] = [];
  const stop = await cancellations.listen((key) => heard.push(key));
  cluster.cleanup(stop);
  return { cancellations, heard };
}

await describeWithPg("cluster cancellations", () => {
  it("reaches every other instance, not the one that sent it", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const c = await instance("gw-c");
    await a.cancellations.broadcast('mcp\u0000token\u0000"7"');
    await eventually(() => b.heard.length === 1 && c.heard.length === 1);
    expect(b.heard).toEqual(['mcp\u0000token\u0000"7"']);
    expect(c.heard).toEqual(b.heard);
    await b.cancellations.broadcast("second");
    await eventually(() => a.heard.length === 1 && c.heard.length === 2);
    expect(a.heard).toEqual(["second"]);
    expect(b.heard).toHaveLength(1);
  });

  it("drops a key too long for a notification instead of failing the caller", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    await a.cancellations.broadcast("x".repeat(MAX_CANCELLATION_KEY_BYTES + 1));
    await a.cancellations.broadcast("after");
    await eventually(() => b.heard.length === 1);
    expect(b.heard).toEqual(["after"]);
  });
});
