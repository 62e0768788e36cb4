// Child-process entry: starts a gateway on a data dir and answers the parent over IPC.
// Options come as JSON in BENCH_GATEWAY_OPTIONS:
//   { dataDir, config?, fsync?: "always"|"none", snapshotEvery?: number }
// With `snapshotEvery`, the store is opened here (to lower the snapshot threshold) and handed to
// the gateway; otherwise the gateway opens the file store itself, as in production.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { collectGarbage } from "./collect-garbage.mjs";
import { loadCore, loadGateway, loadStoreFs, setting } from "./modules.mjs";

const options = JSON.parse(setting("BENCH_GATEWAY_OPTIONS") ?? "{}");
const reply = (message) => process.send?.(message);

try {
  const [{ Gateway }, { parseConfig }] = await Promise.all([loadGateway(), loadCore()]);
  const importedMs = performance.now();
  let store;
  if (options.snapshotEvery) {
    const { openFileStore } = await loadStoreFs();
    store = await openFileStore({
      dataDir: options.dataDir,
      snapshotEvery: options.snapshotEvery,
      ...(options.fsync ? { fsyncMode: options.fsync } : {}),
    });
  }
  const gateway = await Gateway.start({
    config: parseConfig(options.config ?? {}),
    dataDir: options.dataDir,
    port: 0,
    host: "127.0.0.1",
    ...(store ? { store } : {}),
    ...(options.fsync ? { fsync: options.fsync } : {}),
  });
  const readyMs = performance.now();
  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();

  const handlers = {
    async stats() {
      const memory = process.memoryUsage();
      return {
        rss: memory.rss,
        heapUsed: memory.heapUsed,
        loopDelay: {
          p50: loopDelay.percentile(50) / 1e6,
          p99: loopDelay.percentile(99) / 1e6,
          max: loopDelay.max / 1e6,
          count: loopDelay.count,
        },
        ...(store ? { store: await store.stats() } : {}),
      };
    },
    async resetLoopDelay() {
      loopDelay.reset();
      return {};
    },
    gc: collectGarbage,
    /** Snapshots every map of the store now (only with the store opened here, see `snapshotEvery`). */
    async compact() {
      if (!store) throw new Error("compact: the gateway opened its own store (pass snapshotEvery)");
      await store.compact();
      return {};
    },
    async close() {
      loopDelay.disable();
      await gateway.close();
      if (store) await store.close();
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
  process.on("disconnect", () => process.exit(0));
  reply({ type: "ready", port: gateway.port, token: gateway.operatorToken, importedMs, readyMs });
} catch (error) {
  reply({ type: "failed", error: String(error?.stack ?? error) });
  process.exitCode = 1;
  setImmediate(() => process.exit(1));
}
