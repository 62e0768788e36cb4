import { expect, it } from "vitest";
import { describeWithPg } from "../../test/pg-harness";
import { openClusterFlowClaims } from "./flow-claims";
import { openMembership } from "./membership";
import { useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function instance(name: string) {
  const coordination = await cluster.open({ instanceId: name });
  const membership = openMembership(coordination, { leaseMs: 5000 });
  cluster.cleanup(() => membership.stop());
  await membership.renew();
  return { membership, claims: openClusterFlowClaims(coordination) };
}

await describeWithPg("cluster flow claims", () => {
  it("lets one of several instances claiming at once perform a step, and nobody while it lives", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    for (let n = 0; n < 10; n++) {
      const key = `announce:child-${n}`;
      const won = await Promise.all([
        a.claims.claim(key, "spawn-announce", `run-${n}`),
        b.claims.claim(key, "spawn-announce", `run-${n}`),
        a.claims.claim(key, "spawn-announce", `run-${n}`),
        b.claims.claim(key, "spawn-announce", `run-${n}`),
      ]);
      expect(won.filter(Boolean)).toHaveLength(1);
    }
    // The holder itself does not claim it twice; after its release anyone may.
    expect(await a.claims.claim("k", "send", "r")).toBe(true);
    expect(await a.claims.claim("k", "send", "r")).toBe(false);
    expect(await b.claims.claim("k", "send", "r")).toBe(false);
    await b.claims.release("k"); // not b's: no effect
    expect(await b.claims.claim("k", "send", "r")).toBe(false);
    await a.claims.release("k");
    expect(await b.claims.claim("k", "send", "r")).toBe(true);
    expect(await a.claims.orphaned("send")).toEqual([]);
  });

  it("hands the steps of an instance that is gone (or restarted under its id) to another, once", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    expect(await a.claims.claim("send:r1", "send", "r1")).toBe(true);
    expect(await a.claims.claim("announce:c1", "spawn-announce", "r2")).toBe(true);
    await a.membership.leave();
    expect(await b.claims.orphaned("send")).toEqual([{ key: "send:r1", runId: "r1" }]);
    const won = await Promise.all([
      b.claims.claim("send:r1", "send", "r1"),
      b.claims.claim("send:r1", "send", "r1"),
    ]);
    expect(won.filter(Boolean)).toHaveLength(1);
    expect(await b.claims.orphaned("send")).toEqual([]);
    // gw-a comes back under its id: what its previous process claimed is not its own any more.
    const again = await instance("gw-a");
    expect(await again.claims.orphaned("spawn-announce")).toEqual([{ key: "announce:c1", runId: "r2" }]);
    expect(await again.claims.claim("announce:c1", "spawn-announce", "r2")).toBe(true);
    expect(await b.claims.claim("announce:c1", "spawn-announce", "r2")).toBe(false);
  });
});
