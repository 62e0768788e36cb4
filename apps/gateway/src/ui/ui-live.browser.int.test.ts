import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { type AgentWorker, connect, type SwitchboardClient, serve } from "@switchboard/client";
import { loadConfigFile } from "@switchboard/config-loader";
import type { Config } from "@switchboard/core";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Gateway } from "../gateway";
import {
  browserTestsUnavailable,
  EXAMPLE_CONFIG,
  launchChromium,
  withWebchatViewer,
} from "../testing/chromium";
import { deferred } from "../testing/deferred";
import { Relay } from "../testing/tcp-relay";

/**
 * The web UI's live data where events alone do not tell the whole story: a reconnect whose replay
 * cannot cover the time away, an hour with more ended runs and audit entries than one list holds,
 * and the label of a run's reply.
 */
const missing = browserTestsUnavailable("web UI live data");

const CAROL = "agent:main:webchat:dm:carol";
const LAB = "agent:research:discord:group:lab";
/** A replay window of 2 MB: twelve 200 kB runs push everything before them out of it. */
const REPLAY_BYTES = 2 * 1024 * 1024;
const BIG = "x".repeat(200_000);

describe.skipIf(missing !== undefined)("web UI live data", { timeout: 90_000 }, () => {
  let dataDir: string;
  let gateway: Gateway;
  let worker: RunningAgentWorker;
  let holder: AgentWorker;
  let operator: SwitchboardClient;
  let browser: Browser;
  let page: Page;
  let origin: string;
  /** Released by a test: the "hold" and "stream" runs of the holder agent wait on it. */
  let release = deferred();

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "sb-ui-live-"));
    const loaded = await loadConfigFile(EXAMPLE_CONFIG);
    const base = withWebchatViewer(loaded.config, "client-token-for-the-webchat-sessions-live");
    const config: Config = {
      ...base,
      gateway: { ...base.gateway, limits: { ...base.gateway.limits, maxReplayBytes: REPLAY_BYTES } },
      agents: { ...base.agents, list: [...base.agents.list, { id: "holder" }] },
    };
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none" });
    worker = await startAgentWorker({
      url: gateway.url,
      token: gateway.operatorToken,
      config: loaded.config,
      baseDir: loaded.baseDir,
    });
    holder = await serve(
      { url: gateway.url, token: gateway.operatorToken },
      ["holder"],
      async (run, context) => {
        const message = run.input.message;
        if (message === "hold") {
          await release.promise;
          return { reply: "held reply" };
        }
        if (message === "stream") {
          await context.progress("text-delta", { text: "partial words " });
          await release.promise;
          return { reply: "streamed reply, all of it" };
        }
        if (message.startsWith("fail ")) throw new Error(message.slice("fail ".length));
        return { reply: `echo: ${message}` };
      },
      { progressIntervalMs: 0, concurrency: 8 },
    );
    operator = await connect({ url: gateway.url, token: gateway.operatorToken, role: "operator" });
    origin = gateway.url.replace(/^ws/, "http");
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    release.resolve();
    await browser?.close();
    await operator?.close();
    await holder?.stop();
    await worker?.stop();
    await gateway?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  beforeEach(async () => {
    release = deferred();
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    page = await context.newPage();
    page.setDefaultTimeout(10_000);
  });
  afterEach(async () => {
    release.resolve();
    await page?.context().close();
  });

  const say = async (sessionKey: string, message: string) => {
    const { runId } = await operator.chat.send({ sessionKey, message });
    return operator.agent.wait({ runId, timeoutMs: 15_000 });
  };
  const tile = (name: string) => page.locator(`.tile.${name} .n`);
  const signedIn = (at: string, path: string) =>
    `${at}/ui${path}#token=${encodeURIComponent(gateway.operatorToken)}`;
  /** Twelve runs of 200 kB each on sessions of their own: more than the replay window holds. */
  /**
   * The browser offline while run `runId` ends and more than the replay window happens after it,
   * then back: its resume cannot replay the run's end.
   */
  const missTheEnd = async (relay: Relay, runId: string) => {
    relay.cut();
    await page.getByRole("status").filter({ hasText: "Reconnecting…" }).waitFor();
    release.resolve();
    expect(await operator.agent.wait({ runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    for (let i = 0; i < 12; i++) await say(`agent:holder:flood-${i}`, BIG);
    relay.restore();
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor({ timeout: 20_000 });
  };

  it("counts, after a page load, a failed run behind 100 newer ended runs and a call blocked behind 500 newer audit entries", async () => {
    // A blocked call: a CONFIDENTIAL chat may not pass its secret down to the PUBLIC lab.
    await say(LAB, "hello lab");
    await say(CAROL, "remember: the code is 0000");
    expect((await say(CAROL, `ask ${LAB} the code is 0000`)).reply).toMatch(/forbidden/);
    expect(await say("agent:holder:failing", "fail on purpose")).toMatchObject({ status: "error" });
    for (let i = 0; i < 101; i++) await say("agent:holder:busy", `ok ${i}`);
    await operator.sessions.create({ key: "agent:holder:audited" });
    for (let i = 0; i < 510; i++)
      await operator.sessions.patch({ key: "agent:holder:audited", label: `l${i}` });
    // What one list of each would have held: no failed run, no blocked call.
    const recent = await operator.run.list({ statuses: ["ok", "error", "timeout"], limit: 100 });
    expect(recent.runs.filter((run) => run.status !== "ok")).toEqual([]);
    const tail = await operator.audit.tail({ limit: 500 });
    expect(tail.entries.filter((entry) => entry.kind === "policy.blocked")).toEqual([]);
    let blockedCalls = 0;
    for (let after = -1; ; ) {
      const page = await operator.audit.tail({ after, limit: 1000 });
      blockedCalls += page.entries.filter((entry) => entry.kind === "policy.blocked").length;
      if (page.entries.length < 1000) break;
      after = page.entries.at(-1)!.index as number;
    }
    expect(blockedCalls).toBeGreaterThan(0);

    await page.goto(signedIn(origin, "/"));
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByText("What needs attention now.").waitFor();
    expect(await tile("failed").textContent(), "the failed tile").toBe("1");
    expect(await tile("blocked").textContent(), "the blocked tile").toBe(String(blockedCalls));
    await page.getByRole("region", { name: "Failed" }).getByText("on purpose").waitFor();
  });

  it("shows the label of a run's reply", async () => {
    await page.goto(signedIn(origin, "/agents"));
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    const ended = await say("agent:holder:labelled", "label me");
    const { taint } = await operator.sessions.status({ sessionKey: "agent:holder:labelled" });
    await page.getByRole("region", { name: "Recent runs" }).getByRole("link", { name: ended.runId }).click();
    const reply = page.getByRole("region", { name: "Reply" });
    await reply.getByText("echo: label me").waitFor();
    expect(await reply.getByTitle("label of the reply").textContent()).toBe(taint);
  });

  it("shows no run as working after a reconnect that missed its end (replay window passed)", async () => {
    const relay = new Relay(gateway.port);
    await relay.listen();
    try {
      await page.goto(signedIn(`http://127.0.0.1:${relay.port}`, "/"));
      await page.getByRole("heading", { name: "Overview" }).waitFor();
      await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
      const { runId } = await operator.chat.send({ sessionKey: "agent:holder:main", message: "hold" });
      await expect.poll(() => tile("working").textContent()).toBe("1");

      await missTheEnd(relay, runId);

      expect((await operator.run.list({})).runs).toEqual([]);
      await expect.poll(() => tile("working").textContent(), { timeout: 10_000 }).toBe("0");
      await page.getByRole("link", { name: "Agents and runs" }).click();
      await page.getByRole("region", { name: "Active runs" }).getByText("No run in progress.").waitFor();
    } finally {
      await relay.close();
    }
  });

  it("closes the streamed entry and shows the reply after a reconnect that missed the run's end", async () => {
    const relay = new Relay(gateway.port);
    await relay.listen();
    try {
      const key = "agent:holder:streaming";
      await say(key, "first words");
      await page.goto(signedIn(`http://127.0.0.1:${relay.port}`, `/sessions/${encodeURIComponent(key)}`));
      const log = page.getByRole("log", { name: "Transcript entries" });
      await log.getByText("echo: first words").waitFor();
      await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
      const { runId } = await operator.chat.send({ sessionKey: key, message: "stream" });
      await log.getByText("partial words").waitFor();
      await log.getByText("writing…").waitFor();

      await missTheEnd(relay, runId);

      await log.getByText("streamed reply, all of it").waitFor({ timeout: 10_000 });
      await expect.poll(() => log.getByText("writing…").count()).toBe(0);
      expect(
        await page
          .getByText("Active run", { exact: true })
          .locator("xpath=following-sibling::dd[1]")
          .textContent(),
      ).toBe("none");
    } finally {
      await relay.close();
    }
  });
});
