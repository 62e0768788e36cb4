import { readFileSync, writeFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe("a transcript with a damaged line", () => {
  it("serves the rest of the history and says how many lines were skipped, to operators and tools", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const key = "agent:main:damaged";
    const operator = await gw.operator();
    const { sessionId } = (await operator.call("sessions.create", { key })) as { sessionId: string };
    const messages = ["m1", "m2", "m3", "m4"].map((text) => ({
      type: "message" as const,
      label: "PUBLIC" as const,
      message: { role: "user" as const, content: [{ type: "text" as const, text }] },
    }));
    await gw.gateway.store.transcripts.append(sessionId, messages);
    const file = gw.gateway.store.transcripts.locate(sessionId);

    await gw.restart(async () => {
      const lines = readFileSync(file, "utf8").split("\n");
      const index = lines.findIndex((line) => line.includes('"m2"'));
      lines[index] = '{"type":"message","seq":2, garbage';
      writeFileSync(file, lines.join("\n"));
    });

    const peer = await gw.operator();
    const history = (await peer.call("sessions.history", { sessionKey: key, limit: 10 })) as {
      messages: { content: { text: string }[] }[];
      damaged?: number;
    };
    const texts = history.messages.map((m) => m.content[0]!.text);
    expect(texts).toEqual(["m1", "m3", "m4"]);
    expect(history.damaged).toBe(1);

    const tool = await peer.call("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: key, limit: 10 },
      as: key,
    });
    expect(tool.status).toBe("ok");
    expect(tool.damaged).toBe(1);

    // A page that does not reach the damaged line says nothing about it.
    const newest = await peer.call("sessions.history", { sessionKey: key, limit: 1 });
    expect(newest.damaged).toBeUndefined();
  });
});
