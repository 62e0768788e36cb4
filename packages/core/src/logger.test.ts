import { describe, expect, it } from "vitest";
import { type Logger, recordingLogger, silentLogger } from "./logger";

describe("recordingLogger", () => {
  it("keeps fields first and merges child bindings under the call's own fields", () => {
    const { logger, entries } = recordingLogger();
    const store = logger.child({ component: "store", dataDir: "/d" });
    store.warn({ sessionId: "s1", dataDir: "/other" }, "cut a torn tail");
    logger.info({ n: 1 });
    expect(entries).toEqual([
      {
        level: "warn",
        fields: { component: "store", dataDir: "/other", sessionId: "s1" },
        message: "cut a torn tail",
      },
      { level: "info", fields: { n: 1 }, message: undefined },
    ]);
  });
});

describe("silentLogger", () => {
  it("accepts every call and its children are silent too", () => {
    const child: Logger = silentLogger.child({ component: "x" });
    expect(() => child.error({ error: "e" }, "m")).not.toThrow();
    expect(child).toBe(silentLogger);
  });
});
