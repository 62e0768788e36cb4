import path from "node:path";
import { runStoreConformance } from "@switchboard/core/testing";
import { tempDir } from "../test/helpers";
import { openFileStore } from "./file-store";

/** The conformance suite's skip reason for its two-instance cases. */
const SINGLE_INSTANCE =
  "the file store is one process by design: its data-dir lock refuses a second instance (file-store.test.ts checks the refusal)";

runStoreConformance("file store", async () => {
  const { dir, cleanup } = await tempDir();
  const dataDir = path.join(dir, "data");
  const open = () => openFileStore({ dataDir, fsyncMode: "always" });
  return { store: await open(), reopen: open, singleInstance: SINGLE_INSTANCE, cleanup };
});

runStoreConformance("file store (tiny chunks, tiny commit-log segments, eager snapshots)", async () => {
  const { dir, cleanup } = await tempDir();
  const dataDir = path.join(dir, "data");
  const open = () =>
    openFileStore({
      dataDir,
      fsyncMode: "none",
      readChunkBytes: 1024,
      commitLogSegmentBytes: 4096,
      snapshotEvery: 3,
    });
  return { store: await open(), reopen: open, singleInstance: SINGLE_INSTANCE, cleanup };
});
