import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { ConfigInput, RunRecord } from "@switchboard/core";

const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(gatewayRoot, "test", "flow-crash-gateway.mjs");
const distEntry = join(gatewayRoot, "dist", "index.js");
/** The child runs the built gateway: the crash tests skip without it. */
export const flowChildBuilt = existsSync(distEntry) && readFileSync(distEntry, "utf8").includes("Gateway");

/** A gateway in a child process (test/flow-crash-gateway.mjs) with a command line into its store. */
export interface FlowGateway {
  process: ChildProcess;
  url: string;
  token: string;
  exited: Promise<void>;
  /** Lines the child printed that answer no command (e.g. `{holding: "reply", text}`). */
  lines: Array<Record<string, unknown>>;
  command<T>(cmd: string, args?: Record<string, unknown>): Promise<T>;
  runs(): Promise<RunRecord[]>;
}

const children = new Set<ChildProcess>();

/**
 * Starts the child on `dataDir` (file store, fsync on). `holdReplyPosts`: every post of a run's reply
 * to its channel is held for ever, after a `{holding: "reply", text}` line, so a kill lands between
 * the run's durable end and the post.
 */
export function startFlowChild(
  dataDir: string,
  input: ConfigInput,
  options: { holdReplyPosts?: boolean } = {},
): Promise<FlowGateway> {
  const args = [
    childScript,
    dataDir,
    JSON.stringify(input),
    ...(options.holdReplyPosts ? ["hold-reply-posts"] : []),
  ];
  const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "pipe"] });
  children.add(child);
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  void exited.then(() => children.delete(child));
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += String(chunk);
  });
  // A kill -9 closes stdin under a write in flight: that is expected here.
  child.stdin!.on("error", () => undefined);
  const pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  const lines: Array<Record<string, unknown>> = [];
  let nextId = 1;
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`child gateway did not start within 15 s; stderr: ${stderr}`)),
      15_000,
    );
    let started = false;
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      if (!started) {
        started = true;
        clearTimeout(timer);
        const command = <T>(cmd: string, commandArgs: Record<string, unknown> = {}) => {
          const id = nextId++;
          return new Promise<T>((resolveCommand, rejectCommand) => {
            pending.set(id, { resolve: resolveCommand as (value: unknown) => void, reject: rejectCommand });
            child.stdin!.write(`${JSON.stringify({ id, cmd, args: commandArgs })}\n`);
          });
        };
        resolveStart({
          process: child,
          url: String(message.url),
          token: String(message.token),
          exited,
          lines,
          command,
          runs: () => command<RunRecord[]>("runs"),
        });
        return;
      }
      const waiter = message.id === undefined ? undefined : pending.get(Number(message.id));
      if (!waiter) {
        lines.push(message);
        return;
      }
      pending.delete(Number(message.id));
      if (message.error) waiter.reject(new Error(String(message.error)));
      else waiter.resolve(message.result);
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      for (const waiter of pending.values()) waiter.reject(new Error("child gateway exited"));
      pending.clear();
      if (!started)
        reject(
          new Error(
            `child gateway exited before starting (code ${code}, signal ${signal}); stderr: ${stderr}`,
          ),
        );
    });
  });
}

export async function kill9(child: FlowGateway): Promise<void> {
  child.process.kill("SIGKILL");
  await child.exited;
}

/** Kills every child still running (a test's `afterAll`). */
export function killFlowChildren(): void {
  for (const child of children) child.kill("SIGKILL");
}
