import { describe, expect, it } from "vitest";
import { parseAgentCliArgs } from "./agent-cli";

describe("switchboard-agent arguments", () => {
  it("takes several gateway URLs separated by commas", () => {
    const args = parseAgentCliArgs(["--url", "ws://10.0.0.1:18789, ws://10.0.0.2:18789", "--token", "t"], {});
    expect(args?.url).toEqual(["ws://10.0.0.1:18789", "ws://10.0.0.2:18789"]);
  });

  it("names the bad URL in a list", () => {
    expect(() => parseAgentCliArgs(["--url", "ws://ok:1,http://bad:2", "--token", "t"], {})).toThrow(
      /--url: .*"http:\/\/bad:2"/,
    );
  });
});
