import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

interface Page {
  sessions: { key: string }[];
  nextCursor?: string;
}

describe("sessions.list paging", () => {
  it("walks every session once, newest first, page by page with nextCursor", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const op = await gw.operator();
    for (let index = 0; index < 25; index++) {
      await op.call("sessions.create", { key: `agent:main:paging:dm:${String(index).padStart(2, "0")}` });
    }
    const whole = await op.call<Page>("sessions.list", { limit: 200, search: "paging" });
    expect(whole.sessions).toHaveLength(25);
    expect(whole.nextCursor).toBeUndefined();

    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const page: Page = await op.call<Page>("sessions.list", {
        limit: 10,
        search: "paging",
        ...(cursor ? { cursor } : {}),
      });
      seen.push(...page.sessions.map((row) => row.key));
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    expect(seen).toEqual(whole.sessions.map((row) => row.key));

    const bad = await op.request("sessions.list", { cursor: "not-a-cursor" });
    expect(bad.error?.code).toBe("INVALID_REQUEST");
    expect(bad.error?.message).toContain("cursor");
  });
});
