import { parseConfig } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { postgresUrl } from "./store-open";

const postgres = (store: Record<string, unknown>) => {
  const config = parseConfig({ store: { kind: "postgres", ...store } });
  if (config.store.kind !== "postgres") throw new Error("expected a postgres store");
  return config.store;
};

describe("the postgres store URL", () => {
  it("comes from url, or from the environment variable urlEnv names", () => {
    expect(postgresUrl(postgres({ url: "postgres://db/app" }), {})).toBe("postgres://db/app");
    expect(postgresUrl(postgres({ urlEnv: "SB_PG" }), { SB_PG: "postgresql://u:p@db/app" })).toBe(
      "postgresql://u:p@db/app",
    );
  });

  it("names store.urlEnv when the variable is missing or not a postgres URL", () => {
    expect(() => postgresUrl(postgres({ urlEnv: "SB_PG" }), {})).toThrow(
      /store\.urlEnv: the environment variable SB_PG is not set/,
    );
    expect(() => postgresUrl(postgres({ urlEnv: "SB_PG" }), { SB_PG: "mysql://db" })).toThrow(
      /store\.urlEnv: SB_PG must hold a URL starting with postgres:\/\//,
    );
  });
});
