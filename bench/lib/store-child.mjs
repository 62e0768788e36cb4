// Child-process entry for the store-alone figures (B3, B6): imports only @switchboard/store-fs,
// opens the file store on a data dir, answers one `sessions.list({limit: 50})`, then reports ready
// and answers the parent over IPC. Options come as JSON in BENCH_STORE_OPTIONS: { dataDir }.
import { collectGarbage } from "./collect-garbage.mjs";
import { loadStoreFs, setting } from "./modules.mjs";

const options = JSON.parse(setting("BENCH_STORE_OPTIONS") ?? "{}");
const reply = (message) => process.send?.(message);

try {
  const { openFileStore } = await loadStoreFs();
  const importedMs = performance.now();
  const store = await openFileStore({ dataDir: options.dataDir });
  const openedMs = performance.now();
  const { entries } = await store.sessions.list({ limit: 50 });
  const listedMs = performance.now();

  const handlers = {
    async stats() {
      const memory = process.memoryUsage();
      return { rss: memory.rss, heapUsed: memory.heapUsed, store: await store.stats() };
    },
    gc: collectGarbage,
    async close() {
      await store.close();
      setImmediate(() => process.exit(0));
      return {};
    },
  };

  process.on("message", async (message) => {
    try {
      reply({ id: message.id, ok: true, result: await handlers[message.type]() });
    } catch (error) {
      reply({ id: message.id, ok: false, error: String(error?.stack ?? error) });
    }
  });
  process.on("disconnect", () => {
    store.close().finally(() => process.exit(0));
  });
  reply({ type: "ready", importedMs, openedMs, listedMs, listed: entries.length });
} catch (error) {
  reply({ type: "failed", error: String(error?.stack ?? error) });
  process.exitCode = 1;
  setImmediate(() => process.exit(1));
}
