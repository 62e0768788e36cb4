import { describe, expect, it } from "vitest";
import { isSwitchboardError } from "../errors";
import { parseConfig } from "./parse-config";

function issuesOf(input: unknown): { path: string; message: string }[] {
  try {
    parseConfig(input);
  } catch (error) {
    if (isSwitchboardError(error))
      return (error.details as { issues: { path: string; message: string }[] }).issues;
    throw error;
  }
  throw new Error("expected parseConfig to throw");
}

describe("store, ui, telemetry and retention config", () => {
  it("defaults to the file store, the UI on, metrics behind the operator token, traces off", () => {
    const config = parseConfig({});
    expect(config.store).toEqual({ kind: "fs" });
    expect(config.ui).toEqual({ enabled: true });
    expect(config.telemetry).toEqual({ metrics: { enabled: true, public: false } });
    expect(config.gateway.retention).toEqual({ runsDays: 7, archiveDays: 30 });
  });

  it("accepts the spec's postgres store and fills schema and pool", () => {
    const config = parseConfig({ store: { kind: "postgres", urlEnv: "SWITCHBOARD_PG_URL" } });
    expect(config.store).toEqual({
      kind: "postgres",
      urlEnv: "SWITCHBOARD_PG_URL",
      schema: "switchboard",
      pool: { max: 10 },
    });
  });

  it("names the field and the rule for a bad store", () => {
    expect(issuesOf({ store: { kind: "postgres" } })).toContainEqual(
      expect.objectContaining({ path: "store.url", message: expect.stringContaining("url or urlEnv") }),
    );
    expect(issuesOf({ store: { kind: "postgres", url: "postgres://x/db", urlEnv: "PG" } })).toContainEqual(
      expect.objectContaining({ path: "store.urlEnv" }),
    );
    expect(issuesOf({ store: { kind: "postgres", url: "mysql://x/db" } })).toContainEqual(
      expect.objectContaining({ path: "store.url", message: expect.stringContaining("postgres://") }),
    );
    expect(issuesOf({ store: { kind: "redis" } })[0]?.path).toBe("store.kind");
    expect(issuesOf({ store: { kind: "postgres", url: "postgres://x", schema: "Bad-Name" } })).toContainEqual(
      expect.objectContaining({ path: "store.schema" }),
    );
  });

  it("accepts traces with an OTLP endpoint, null archiveDays, and refuses unknown keys", () => {
    const config = parseConfig({
      telemetry: {
        metrics: { public: true },
        traces: { exporter: "otlp", endpoint: "http://127.0.0.1:4318" },
      },
      gateway: { retention: { archiveDays: null, runsDays: 2 } },
    });
    expect(config.telemetry.traces).toEqual({ exporter: "otlp", endpoint: "http://127.0.0.1:4318" });
    expect(config.gateway.retention).toEqual({ runsDays: 2, archiveDays: null });
    expect(issuesOf({ ui: { enable: true } })[0]?.path).toBe("ui.enable");
    expect(issuesOf({ gateway: { retention: { runsDays: 0 } } })[0]?.path).toBe("gateway.retention.runsDays");
  });
});
