import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TestPeer } from "../testing/test-peer";
import { CLI_BUILT, CliProcess } from "./cli-process";

// SIGTERM to `switchboard up` with runs waiting in a lane: dispatch stops before the in-process
// worker does, so the stopping worker finishes its running runs and is handed nothing else (a
// run ending during its grace used to free main's lane for the next queued run, handed to the
// stopping worker and failed there); the queued runs stay queued and run after the next start.

const processes: CliProcess[] = [];
afterAll(async () => {
  for (const child of processes) await child.stop("SIGKILL");
});

async function startUp(
  dir: string,
  dataDir: string,
  config: string,
): Promise<{ up: CliProcess; url: string }> {
  const up = CliProcess.start(
    ["up", "--config", config, "--port", "0", "--data-dir", dataDir, "--json", "--log-level", "warn"],
    { cwd: dir },
  );
  processes.push(up);
  await up.waitForOutput("\n", 30_000);
  const banner = JSON.parse(up.stdout.split("\n")[0]!) as { url: string };
  return { up, url: banner.url };
}

describe.skipIf(!CLI_BUILT)("SIGTERM to `switchboard up` with runs queued", { timeout: 120_000 }, () => {
  it("the running run finishes, and the queued ones stay queued and run after the next start", async () => {
    const dir = await mkdtemp(join(tmpdir(), "switchboard-up-stop-"));
    const dataDir = join(dir, "data");
    const config = join(dir, "switchboard.json5");
    await writeFile(
      config,
      JSON.stringify({
        agents: {
          list: [
            {
              id: "main",
              default: true,
              model: {
                provider: "scripted",
                rules: [
                  { when: "^slow 1", delayMs: 1000, reply: "slow 1 done" },
                  { when: "^slow 2", delayMs: 3000, reply: "slow 2 done" },
                  { reply: "echo: {{message}}" },
                ],
              },
            },
          ],
        },
      }),
    );
    try {
      const { up, url } = await startUp(dir, dataDir, config);
      const token = (await readFile(join(dataDir, "operator-token"), "utf8")).trim();
      // Sent at once over one connection (a CLI process per send takes a second on a slow machine).
      const sender = await TestPeer.connect(url, { token, role: "operator" });
      const runIds: string[] = [];
      const sends: Array<[string, string]> = [
        ["main", "slow 1"],
        ["agent:main:side", "slow 2"],
        ["main", "second"],
        ["main", "third"],
      ];
      for (const [sessionKey, message] of sends)
        runIds.push((await sender.call<{ runId: string }>("chat.send", { sessionKey, message })).runId);
      sender.close();
      // "slow 1" and "slow 2" are running; "second" and "third" wait in main's lane. "slow 1" ends
      // while the worker still waits for "slow 2".
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await up.stop("SIGTERM", 30_000)).toBe(0);
      expect(up.stderr).toContain("stopped");

      const { url: url2 } = await startUp(dir, dataDir, config);
      const op = await TestPeer.connect(url2, { token, role: "operator" });
      const outcomes: string[] = [];
      for (const runId of runIds) {
        const waited = await op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
          runId,
          timeoutMs: 8000,
        });
        outcomes.push(`${waited.status} ${waited.reply ?? waited.error ?? ""}`);
      }
      op.close();
      expect(outcomes).toEqual(["ok slow 1 done", "ok slow 2 done", "ok echo: second", "ok echo: third"]);
    } finally {
      for (const child of processes.splice(0)) await child.stop("SIGTERM", 30_000);
      await rm(dir, { recursive: true, force: true });
    }
  });
});
