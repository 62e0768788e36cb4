import { expect, it } from "vitest";
import { adminQuery, describeWithPg } from "../../test/pg-harness";
import { openClusterSecrets } from "./secrets";
import { useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

await describeWithPg("cluster secrets", () => {
  it("creates the operator token and audit key once, whichever instances start at once", async () => {
    const instances = await Promise.all([1, 2, 3].map(() => cluster.open()));
    const secrets = instances.map((coordination) => openClusterSecrets(coordination));
    const tokens = await Promise.all(secrets.map((s) => s.operatorToken()));
    const keys = await Promise.all(secrets.map((s) => s.auditKey()));
    expect(new Set(tokens).size).toBe(1);
    expect(tokens[0]).toMatch(/^sb_op_[A-Za-z0-9_-]{32}$/);
    expect(keys[0]!.byteLength).toBe(32);
    expect(Buffer.from(keys[1]!).equals(Buffer.from(keys[0]!))).toBe(true);
    expect(Buffer.from(keys[2]!).equals(Buffer.from(keys[0]!))).toBe(true);
    // A later instance reads the same values.
    const later = openClusterSecrets(await cluster.open());
    expect(await later.operatorToken()).toBe(tokens[0]);
    expect(Buffer.from(await later.auditKey()).equals(Buffer.from(keys[0]!))).toBe(true);
    const rows = await adminQuery(`SELECT name FROM "${cluster.schema}".cluster_meta ORDER BY name`);
    expect(rows.rows.map((row) => row.name)).toEqual(["secrets.auditKey", "secrets.operatorToken"]);
  });

  it("refuses an audit key shortened in the database", async () => {
    const coordination = await cluster.open();
    await openClusterSecrets(coordination).auditKey();
    await adminQuery(
      `UPDATE "${cluster.schema}".cluster_meta SET value = 'AAAA' WHERE name = 'secrets.auditKey'`,
    );
    await expect(openClusterSecrets(coordination).auditKey()).rejects.toThrow(
      /audit key .* is 3 bytes; at least 16/,
    );
  });
});
