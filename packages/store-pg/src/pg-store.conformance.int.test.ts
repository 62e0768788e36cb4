import { runStoreConformance } from "@switchboard/core/testing";
import { describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { openPostgresStore } from "./pg-store";

await describeWithPg("PostgreSQL store conformance", () => {
  runStoreConformance("postgres store", async () => {
    const schema = testSchemaName();
    const open = () => openPostgresStore({ url: TEST_PG_URL, schema, pool: { max: 4 } });
    return {
      store: await open(),
      reopen: open,
      // A second gateway instance on the same database and schema.
      openSecond: open,
      cleanup: () => dropSchema(schema),
    };
  });
});
