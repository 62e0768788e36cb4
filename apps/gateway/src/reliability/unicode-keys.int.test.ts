import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";

let gw: TestGateway;
afterEach(async () => gw?.close());

describe("Unicode in session keys", () => {
  it("NFC and NFD spellings of one key address one session", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const op = await gw.operator();
    const nfc = "agent:main:webchat:dm:jos\u00e9";
    const nfd = "agent:main:webchat:dm:jose\u0301";
    const first = await op.call<{ key: string; sessionId: string; created: boolean }>("sessions.create", {
      key: nfc,
    });
    const second = await op.call<{ key: string; sessionId: string; created: boolean }>("sessions.create", {
      key: nfd,
    });
    expect(first.created).toBe(true);
    expect(second).toMatchObject({ key: first.key, sessionId: first.sessionId, created: false });
    const status = await op.call<{ sessionId: string }>("sessions.status", { sessionKey: nfd });
    expect(status.sessionId).toBe(first.sessionId);
    const listed = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", { limit: 10 });
    expect(listed.sessions.filter((row) => row.key.includes("webchat"))).toHaveLength(1);
  });
});
