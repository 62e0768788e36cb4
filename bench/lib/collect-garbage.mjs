// Shared by the benchmark child processes: settle the heap before a memory reading.

/** Runs a few full GCs with short pauses between them (needs `--expose-gc`; otherwise a no-op). */
export async function collectGarbage() {
  if (typeof globalThis.gc === "function") {
    for (let i = 0; i < 3; i++) {
      globalThis.gc();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return { collected: typeof globalThis.gc === "function" };
}
