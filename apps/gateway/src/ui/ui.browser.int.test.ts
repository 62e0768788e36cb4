import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { type AgentWorker, connect, type SwitchboardClient, serve } from "@switchboard/client";
import { loadConfigFile } from "@switchboard/config-loader";
import type { Config } from "@switchboard/core";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Gateway } from "../gateway";
import {
  browserTestsUnavailable,
  EXAMPLE_CONFIG,
  launchChromium,
  withWebchatViewer,
} from "../testing/chromium";
import { UI_CONTENT_SECURITY_POLICY } from "./ui-routes";

/**
 * The web UI end to end: Debian's Chromium (headless, through playwright-core) against a real gateway
 * with the reference agents of the example config, finding elements by role, label and text.
 */
const REPO = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../../..");
/** `SWITCHBOARD_UPDATE_SCREENSHOTS=1` writes the README's screenshots; otherwise they go to a temp dir. */
const SCREENSHOTS =
  process.env.SWITCHBOARD_UPDATE_SCREENSHOTS === "1" ? join(REPO, "docs/screenshots") : undefined;

const missing = browserTestsUnavailable("web UI browser tests");

const CAROL = "agent:main:webchat:dm:carol";
const LAB = "agent:research:discord:group:lab";
const MALLORY = "agent:main:webchat:dm:mallory";
const MARKUP = "<img src=x onerror=alert(1)>";
const CLIENT_TOKEN = "client-token-for-the-webchat-sessions";
const STREAMED = ["Streaming ", "one ", "word ", "at ", "a ", "time."];

describe.skipIf(missing !== undefined)("web UI in Chromium", { timeout: 20_000 }, () => {
  let dataDir: string;
  let shots: string;
  let gateway: Gateway;
  let worker: RunningAgentWorker;
  let writer: AgentWorker;
  let config: Config;
  /** The run of "main" that asked the lab a question (overview test), opened in the agents test. */
  let askRunId = "";
  let operator: SwitchboardClient;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let origin: string;
  const consoleErrors: string[] = [];
  const requests: string[] = [];
  const dialogs: string[] = [];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "sb-ui-browser-"));
    shots = SCREENSHOTS ?? join(dataDir, "screenshots");
    await mkdir(shots, { recursive: true });
    const loaded = await loadConfigFile(EXAMPLE_CONFIG);
    // Plus a "writer" agent served by a worker of this test that streams its reply word by word.
    config = {
      ...withWebchatViewer(loaded.config, CLIENT_TOKEN),
      agents: { ...loaded.config.agents, list: [...loaded.config.agents.list, { id: "writer" }] },
    };
    const launched = launchChromium();
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none" });
    worker = await startAgentWorker({
      url: gateway.url,
      token: gateway.operatorToken,
      config: loaded.config,
      baseDir: loaded.baseDir,
    });
    writer = await serve(
      { url: gateway.url, token: gateway.operatorToken },
      ["writer"],
      async (_run, run) => {
        for (const word of STREAMED) {
          await run.progress("text-delta", { text: word });
          await new Promise((done) => setTimeout(done, 250));
        }
        return { reply: STREAMED.join("") };
      },
      { progressIntervalMs: 0 },
    );
    operator = await connect({ url: gateway.url, token: gateway.operatorToken, role: "operator" });
    origin = gateway.url.replace(/^ws/, "http");

    // What a user did before opening the UI: a PUBLIC lab channel, a CONFIDENTIAL chat that read a
    // secret, its blocked attempt to pass the secret down to the lab, and a message full of markup.
    const say = async (sessionKey: string, message: string) => {
      const { runId } = await operator.chat.send({ sessionKey, message });
      return operator.agent.wait({ runId, timeoutMs: 10_000 });
    };
    await say(LAB, "hello lab");
    await say(CAROL, "remember: the code is 0000");
    const blocked = await say(CAROL, `ask ${LAB} the code is 0000`);
    expect(blocked.reply).toMatch(/forbidden/);
    await say(MALLORY, MARKUP);

    browser = await launched;
    context = await browser.newContext({ viewport: { width: 1280, height: 860 }, colorScheme: "light" });
    page = await context.newPage();
    page.setDefaultTimeout(8_000);
    page.on("console", (message) => {
      if (message.type() === "error") consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => consoleErrors.push(error.message));
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    context.on("request", (request) => requests.push(request.url()));
    page.on("websocket", (socket) => requests.push(socket.url()));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await operator?.close();
    await worker?.stop();
    await writer?.stop();
    await gateway?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("refuses a wrong token with the gateway's error and shows nothing else", async () => {
    const response = await page.goto(`${origin}/`);
    expect(page.url()).toBe(`${origin}/ui/`);
    expect(response?.headers()["content-security-policy"]).toBe(UI_CONTENT_SECURITY_POLICY);
    await page.getByLabel("Token").fill("not-the-token");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("invalid token");
    expect(await page.getByRole("navigation").count()).toBe(0);
    expect(await page.evaluate("sessionStorage.getItem('switchboard.token')")).toBeNull();
    await page.screenshot({ path: join(shots, "sign-in.png") });
  });

  it("signs in from the #token= link, drops it from the address bar and keeps it in sessionStorage only", async () => {
    await page.goto(`${origin}/ui/#token=${encodeURIComponent(gateway.operatorToken)}`);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    expect(page.url()).toBe(`${origin}/ui/`);
    expect(await page.evaluate("sessionStorage.getItem('switchboard.token')")).toBe(gateway.operatorToken);
    expect(await page.evaluate("document.cookie")).toBe("");
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    // The blocked write-down of the last hour is on the landing view.
    await page
      .getByText(/write-down blocked/)
      .first()
      .waitFor();
    await page.screenshot({ path: join(shots, "overview.png"), fullPage: true });
  });

  it("lists sessions with their badges, filters them, and opens one", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Sessions" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    const rows = page.getByRole("table").getByRole("row");
    await page.getByRole("link", { name: LAB }).waitFor();
    expect(await rows.count()).toBeGreaterThanOrEqual(4);
    const carolRow = rows.filter({ has: page.getByRole("link", { name: CAROL }) });
    expect(await carolRow.textContent()).toContain("CONFIDENTIAL");
    await page.screenshot({ path: join(shots, "sessions.png"), fullPage: true });

    await page.getByLabel("Search").fill("carol");
    await expect.poll(() => rows.count()).toBe(2); // the header row and carol
    expect(page.url()).toContain("q=carol");
    await page.getByLabel("Search").fill("");
    await page.getByLabel("Kind").selectOption("group");
    await expect.poll(() => page.getByRole("link", { name: CAROL }).count()).toBe(0);
    await page.getByRole("link", { name: LAB }).waitFor();
    await page.getByLabel("Kind").selectOption("");
    await page.getByRole("link", { name: CAROL }).click();
    await page
      .getByRole("heading", { name: /Session/ })
      .first()
      .waitFor();
    expect(decodeURIComponent(page.url())).toContain(`/ui/sessions/${CAROL}`);
    await page.getByText("remember: the code is 0000", { exact: true }).waitFor();
  });

  it("sends a message and sees the reply arrive live, then a reply produced by another client", async () => {
    const log = page.getByRole("log", { name: "Transcript entries" });
    await page.getByRole("textbox", { name: "Message" }).fill("ping");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    await page.getByText("Reply: pong").waitFor();
    await log.getByText("pong", { exact: true }).waitFor();

    // Someone else (the CLI, a channel) talks to the same session: the page updates by itself.
    const { runId } = await operator.chat.send({ sessionKey: CAROL, message: "hello from another client" });
    await log.getByText("echo: hello from another client").waitFor({ timeout: 10_000 });
    await operator.agent.wait({ runId, timeoutMs: 10_000 });

    // The blocked call in this transcript is a tool call paired with its result, collapsed.
    const call = log.getByText(/Tool call sessions_send/).first();
    await call.click();
    await log
      .getByText(/write-down blocked/)
      .first()
      .waitFor();
    await page.screenshot({ path: join(shots, "session.png"), fullPage: true });
    await page.emulateMedia({ colorScheme: "dark" });
    await page.screenshot({ path: join(shots, "session-dark.png"), fullPage: true });
    await page.emulateMedia({ colorScheme: "light" });

    // The toggle that hides tool traffic is kept in the URL.
    await page.getByLabel("Show tool calls").uncheck();
    expect(page.url()).toContain("tools=hide");
    await expect.poll(() => log.getByText(/Tool call sessions_send/).count()).toBe(0);
  });

  it("shows a running reply as it streams, then the recorded entry", async () => {
    const key = "agent:writer:main";
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(key)}`);
    await page.getByText("No messages yet.").waitFor();
    await page.getByRole("checkbox", { name: "Wait for the reply" }).uncheck();
    await page.getByRole("textbox", { name: "Message" }).fill("write something");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    const log = page.getByRole("log", { name: "Transcript entries" });
    // Part of the reply is on screen while the run is still writing.
    const partial = log.getByRole("listitem").filter({ hasText: "writing…" });
    await partial.filter({ hasText: "Streaming one" }).waitFor();
    expect(await partial.textContent()).not.toContain("time.");
    await log.getByText(STREAMED.join(""), { exact: true }).waitFor({ timeout: 10_000 });
    await expect.poll(() => log.getByText("writing…").count()).toBe(0);
  });

  it("follows a session opened by its alias (main) live", async () => {
    await page.goto(`${origin}/ui/sessions/main`);
    await page.getByText("This session does not exist yet: sending a message creates it.").waitFor();
    await page.getByRole("checkbox", { name: "Wait for the reply" }).uncheck();
    await page.getByRole("textbox", { name: "Message" }).fill("ping");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    // Without waiting on the run, the reply can only come from the events of agent:main:main.
    await page.getByRole("log", { name: "Transcript entries" }).getByText("pong", { exact: true }).waitFor();
  });

  it("shows markup from a transcript as text and runs none of it", async () => {
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(MALLORY)}`);
    const log = page.getByRole("log", { name: "Transcript entries" });
    await log.getByText(MARKUP, { exact: true }).waitFor();
    await log.getByText(`echo: ${MARKUP}`).waitFor();
    expect(await page.locator("img").count()).toBe(0);
    expect(dialogs).toEqual([]);
  });

  it("shows the blocked write-down in the audit log and verifies the chain", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Audit" }).click();
    const blockedRow = page.getByRole("row").filter({ hasText: "write-down blocked" }).first();
    await blockedRow.waitFor();
    expect(await blockedRow.textContent()).toContain("BLOCK");
    expect(await blockedRow.textContent()).toContain(LAB);
    await page.getByRole("button", { name: "Verify" }).click();
    await page.getByText(/The audit chain is intact: \d+ entries verified/).waitFor();
    await page.getByLabel("Kind").selectOption("policy.blocked");
    await expect.poll(() => page.getByRole("row").count()).toBeGreaterThanOrEqual(2);
    await page.screenshot({ path: join(shots, "audit.png"), fullPage: true });
  });

  it("simulates the same call in the policy simulator: BLOCK, with the rules evaluated", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Policy" }).click();
    await page.getByLabel("Calling session").fill(CAROL);
    await page.getByLabel("Tool").selectOption("sessions_send");
    await page.getByLabel("Arguments (JSON)").fill(JSON.stringify({ sessionKey: LAB, message: "x" }));
    await page.getByRole("button", { name: "Simulate" }).click();
    await page.getByRole("heading", { name: /Decision: BLOCK/ }).waitFor();
    await page
      .getByText(/write-down blocked/)
      .first()
      .waitFor();
    expect(await page.getByRole("table").getByRole("row").count()).toBeGreaterThan(1);
    await page.screenshot({ path: join(shots, "policy.png"), fullPage: true });

    await page.getByLabel("Arguments (JSON)").fill("{not json");
    await page.getByRole("button", { name: "Simulate" }).click();
    await page.getByRole("alert").filter({ hasText: "Arguments: not valid JSON" }).waitFor();
  });

  it("draws who talks to whom on the overview as the agents talk", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Overview" }).click();
    const { runId } = await operator.chat.send({ sessionKey: "main", message: `ask ${LAB} anything new?` });
    askRunId = runId;
    const ended = await operator.agent.wait({ runId, timeoutMs: 10_000 });
    expect(ended.reply).toMatch(/^ok:/);
    const topology = page.getByRole("region", { name: "Topology of active chains" });
    await topology.getByRole("img", { name: "Who is talking to whom" }).waitFor();
    await topology
      .getByRole("listitem")
      .filter({ hasText: `sent to ${LAB}` })
      .first()
      .waitFor();
    await page
      .getByRole("region", { name: "Recently finished" })
      .getByRole("link", { name: LAB })
      .first()
      .waitFor();
    await page.screenshot({ path: join(shots, "overview.png"), fullPage: true });
  });

  it("shows agents with their workers and the runs it saw", async () => {
    await page.getByRole("navigation").getByRole("link", { name: "Agents and runs" }).click();
    const mainRow = page.getByRole("row").filter({ has: page.getByRole("link", { name: "research" }) });
    await mainRow.getByText("connected").waitFor();
    const recent = page.getByRole("region", { name: "Recent runs" });
    await recent.getByRole("link", { name: LAB }).first().waitFor();
    await page.screenshot({ path: join(shots, "agents.png"), fullPage: true });
    // A run's timeline: started, its tool calls, its end.
    await recent.getByRole("link", { name: askRunId }).click();
    const timeline = page.getByRole("region", { name: "Timeline" });
    await timeline.getByText(/started on lane/).waitFor();
    await timeline.getByText("tool call sessions_send").waitFor();
    await timeline.getByText("ended ok").waitFor();
  });

  it("changes a session with confirmation for destructive steps, showing a refusal verbatim", async () => {
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(LAB)}`);
    const actions = page.getByRole("region", { name: "Actions" });
    await actions.getByRole("textbox", { name: "Label" }).fill("lab-room");
    await actions.getByRole("button", { name: "Set label" }).click();
    await page.getByRole("region", { name: "Status" }).getByText("lab-room").waitFor();
    expect((await operator.sessions.status({ sessionKey: LAB })).label).toBe("lab-room");

    // Lowering a clearance below the taint asks first; cancelling changes nothing.
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(CAROL)}`);
    await actions.getByRole("combobox", { name: "Clearance" }).selectOption("PUBLIC");
    await actions.getByRole("button", { name: "Set clearance" }).click();
    await page
      .getByRole("alertdialog")
      .getByText(/below its taint CONFIDENTIAL/)
      .waitFor();
    await page.getByRole("button", { name: "Cancel" }).click();
    expect((await operator.sessions.status({ sessionKey: CAROL })).clearance).toBe("CONFIDENTIAL");

    // The gateway refuses to delete a main session: its words, as they are.
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent("agent:main:main")}`);
    await actions.getByRole("button", { name: "Delete…" }).click();
    await page.getByRole("button", { name: "Confirm delete" }).click();
    await actions.getByRole("alert").filter({ hasText: "the main session cannot be deleted" }).waitFor();

    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(MALLORY)}`);
    await actions.getByRole("button", { name: "Delete…" }).click();
    await page.getByRole("button", { name: "Confirm delete" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    await page.getByRole("link", { name: CAROL }).waitFor();
    expect(await page.getByRole("link", { name: MALLORY }).count()).toBe(0);
  });

  it("pages through many sessions: the newest page first, older ones on demand", async () => {
    for (let index = 0; index < 130; index++) {
      await operator.sessions.create({ key: `agent:main:bulk:dm:${String(index).padStart(3, "0")}` });
    }
    await page.goto(`${origin}/ui/sessions?q=bulk`);
    const rows = page.getByRole("table").getByRole("row");
    await expect.poll(() => rows.count()).toBe(101); // the header row and the first page
    await page.getByText(/The 100 most recently updated sessions/).waitFor();
    await page.getByRole("link", { name: "agent:main:bulk:dm:129" }).waitFor();
    await page.getByRole("button", { name: "Show 100 older sessions" }).click();
    await expect.poll(() => rows.count()).toBe(131);
    await page.getByRole("link", { name: "agent:main:bulk:dm:000" }).waitFor();
    expect(await page.getByRole("button", { name: /older sessions/ }).count()).toBe(0);
    await page.getByText("130 sessions.").waitFor();
  });

  it("shows runs that ended before the page was opened (runs.list), after a reload", async () => {
    await page.goto(`${origin}/ui/agents`);
    const recent = page.getByRole("region", { name: "Recent runs" });
    // Nothing was seen live by this fresh page: these rows come from the gateway's run list.
    await recent.getByRole("link", { name: LAB }).first().waitFor();
    await recent.getByRole("link", { name: CAROL }).first().waitFor();
  });

  it("logged no console error and sent nothing beyond the gateway, the token in no URL", async () => {
    expect(consoleErrors).toEqual([]);
    const wsOrigin = origin.replace(/^http/, "ws");
    const elsewhere = requests.filter(
      (url) => !url.startsWith(`${origin}/`) && !url.startsWith(`${wsOrigin}/`) && !url.startsWith("data:"),
    );
    expect(elsewhere).toEqual([]);
    // A fragment never leaves the browser (it is not part of an HTTP request line).
    const sent = requests.map((url) => url.split("#", 1)[0]!);
    expect(sent.filter((url) => url.includes(gateway.operatorToken))).toEqual([]);
    expect(requests.length).toBeGreaterThan(3);
  });

  it("reconnects by itself after the gateway restarts, says so, and keeps following the session", async () => {
    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(CAROL)}`);
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    const port = gateway.port;
    await gateway.close();
    await page.getByRole("status").filter({ hasText: "Reconnecting…" }).waitFor();
    gateway = await Gateway.start({ config, dataDir, port, fsync: "none" });
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor({ timeout: 15_000 });
    // The reference agents reconnect too; a reply produced now arrives in the open page.
    const { runId } = await operator.chat.send({ sessionKey: CAROL, message: "after the restart" });
    await operator.agent.wait({ runId, timeoutMs: 15_000 });
    await page
      .getByRole("log", { name: "Transcript entries" })
      .getByText("echo: after the restart")
      .waitFor({ timeout: 10_000 });
  });

  it("forgets the token on sign-out", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").waitFor();
    expect(await page.evaluate("sessionStorage.getItem('switchboard.token')")).toBeNull();
  });

  it("lets a client token read only the sessions it is allowed", async () => {
    await page.getByLabel("Token").fill(CLIENT_TOKEN);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("status").filter({ hasText: "Connected" }).waitFor();
    // No Overview, Audit or Policy for a client: only what its token allows.
    expect(await page.getByRole("navigation").getByRole("link").allTextContents()).toEqual(["Sessions"]);
    await page.getByRole("navigation").getByRole("link", { name: "Sessions" }).click();
    await page.getByRole("textbox", { name: "Session key" }).fill(CAROL);
    await page.getByRole("button", { name: "Open" }).click();
    await page.getByRole("log", { name: "Transcript entries" }).getByText("pong", { exact: true }).waitFor();

    await page.goto(`${origin}/ui/sessions/${encodeURIComponent(LAB)}`);
    await page
      .getByRole("alert")
      .filter({ hasText: `may not access session ${LAB}` })
      .first()
      .waitFor();
    expect(await page.getByText("hello lab").count()).toBe(0);
  });
});
