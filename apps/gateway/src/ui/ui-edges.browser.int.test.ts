import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { connect, type SwitchboardClient } from "@switchboard/client";
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
import { Relay } from "../testing/tcp-relay";

/** The web UI off the paths its own tests walk: a sign-out followed by another token, a reconnect after a long time offline. */
const missing = browserTestsUnavailable("web UI edges");

const LAB = "agent:research:discord:group:lab";
const CLIENT_TOKEN = "client-token-for-the-webchat-sessions-edges";

describe.skipIf(missing !== undefined)("web UI off the usual paths", { timeout: 60_000 }, () => {
  let dataDir: string;
  let gateway: Gateway;
  let worker: RunningAgentWorker;
  let config: Config;
  let operator: SwitchboardClient;
  let browser: Browser;
  let page: Page;
  let origin: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "sb-ui-edges-"));
    const loaded = await loadConfigFile(EXAMPLE_CONFIG);
    config = withWebchatViewer(loaded.config, CLIENT_TOKEN);
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none" });
    worker = await startAgentWorker({
      url: gateway.url,
      token: gateway.operatorToken,
      config: loaded.config,
      baseDir: loaded.baseDir,
    });
    operator = await connect({ url: gateway.url, token: gateway.operatorToken, role: "operator" });
    origin = gateway.url.replace(/^ws/, "http");
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await operator?.close();
    await worker?.stop();
    await gateway?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  beforeEach(async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    page = await context.newPage();
    page.setDefaultTimeout(10_000);
  });
  afterEach(async () => {
    await page?.context().close();
  });

  const say = async (sessionKey: string, message: string) => {
    const { runId } = await operator.chat.send({ sessionKey, message });
    const ended = await operator.agent.wait({ runId, timeoutMs: 15_000 });
    return ended;
  };

  it("shows a client token signing in after an operator's sign-out none of the runs the operator saw", async () => {
    await page.goto(`${origin}/ui/agents#token=${encodeURIComponent(gateway.operatorToken)}`);
    await page.getByRole("heading", { name: "Agents and runs" }).waitFor();
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    // The operator's page sees a run of the PUBLIC lab channel live, with its reply.
    const lab = await say(LAB, "lab-only note 4711");
    const recent = page.getByRole("region", { name: "Recent runs" });
    await recent.getByRole("link", { name: lab.runId }).click();
    await page.getByRole("region", { name: "Timeline" }).getByText("ended ok").waitFor();
    const reply = lab.reply ?? "";
    expect(reply).not.toBe("");

    // The operator signs out; a client token allowed the webchat sessions only signs in in the tab.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").fill(CLIENT_TOKEN);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    expect(await page.locator(".who").textContent()).toBe("client");
    // The client may not access the lab session: nothing of its run may be on its screen.
    const body = (await page.locator("main").textContent()) ?? "";
    expect(body).not.toContain(LAB);
    expect(body).not.toContain(reply);

    // Nor in the Agents and runs view it reaches with the browser's back button: a client is told
    // that view is for operators (before, it listed the operator's runs).
    await page.goBack();
    await page.getByRole("heading", { name: "Operators only" }).waitFor();
    expect(await page.getByRole("link", { name: LAB }).count()).toBe(0);
    expect((await page.locator("main").textContent()) ?? "").not.toContain(reply);
  });

  it("loses no transcript entry written while the browser was offline (reconnect with more than a page)", async () => {
    const relay = new Relay(gateway.port);
    await relay.listen();
    try {
      const key = "agent:main:webchat:dm:offline";
      await say(key, "first words");
      const viaRelay = `http://127.0.0.1:${relay.port}`;
      await page.goto(
        `${viaRelay}/ui/sessions/${encodeURIComponent(key)}#token=${encodeURIComponent(gateway.operatorToken)}`,
      );
      const log = page.getByRole("log", { name: "Transcript entries" });
      await log.getByText("echo: first words").waitFor();
      await page.getByText("Start of the transcript.").waitFor();

      // The browser's network drops; the agents keep talking in the session meanwhile.
      relay.cut();
      await page.getByRole("status").filter({ hasText: "Reconnecting…" }).waitFor();
      for (let i = 0; i < 40; i++) await say(key, `while offline ${String(i).padStart(2, "0")}`);
      relay.restore();
      await page.getByRole("status").filter({ hasText: "Connected" }).waitFor({ timeout: 20_000 });
      await log.getByText("echo: while offline 39").first().waitFor({ timeout: 10_000 });
      await page.waitForTimeout(1000);

      // Load everything older the page offers, then every entry must be there exactly once.
      for (let i = 0; i < 10; i++) {
        const older = page.getByRole("button", { name: "Load older entries" });
        if ((await older.count()) === 0) break;
        await older.click();
        await page.waitForTimeout(300);
      }
      await page.getByText("Start of the transcript.").waitFor();
      const missingEntries: string[] = [];
      for (let i = 0; i < 40; i++) {
        const text = `while offline ${String(i).padStart(2, "0")}`;
        if ((await log.getByText(text, { exact: true }).count()) !== 1) missingEntries.push(text);
      }
      expect(missingEntries).toEqual([]);
    } finally {
      await relay.close();
    }
  });
});
