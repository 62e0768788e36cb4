// Child processes of the benchmarks: a gateway (bench/lib/gateway-child.mjs), the file store alone
// (bench/lib/store-child.mjs) and, as a baseline, a bare `ws` echo server started with `node -e`.
// Every child is killed when the runner exits.
import { spawn } from "node:child_process";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { ROOT, setting } from "./modules.mjs";
import { now } from "./stats.mjs";

const GATEWAY_CHILD = fileURLToPath(new URL("./gateway-child.mjs", import.meta.url));
const STORE_CHILD = fileURLToPath(new URL("./store-child.mjs", import.meta.url));
const children = new Set();
/** Extra node flags for gateway and store children, e.g. BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof". */
const EXTRA_NODE_ARGS = (setting("BENCH_GATEWAY_NODE_ARGS") ?? "").split(/\s+/).filter(Boolean);
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

/** RSS of a process from `/proc/<pid>/status` (VmRSS), in bytes. */
export function rssOf(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

/** CPU time (user + system) a process has used so far, in ms (from `/proc/<pid>/stat`, 100 Hz ticks). */
export function cpuMsOf(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 14 and 15 of stat(5) (utime, stime); the slice starts at field 3.
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function track(child) {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

/** Waits for the child's first IPC message of one of `types` (or its exit). */
function firstMessage(child, types, timeoutMs) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => fail(new Error(`child did not report ${types.join("/")} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onMessage = (message) => {
      if (!types.includes(message?.type)) return;
      cleanup();
      resolve(message);
    };
    const onExit = (code, signal) =>
      fail(new Error(`child exited (${signal ?? code}) before reporting ${types.join("/")}`));
    function cleanup() {
      clearTimeout(timer);
      child.off("message", onMessage);
      child.off("exit", onExit);
    }
    function fail(error) {
      cleanup();
      reject(error);
    }
    child.on("message", onMessage);
    child.on("exit", onExit);
  });
}

/**
 * Spawns a gateway child. Resolves once it reported ready, with `spawnedAt` (parent clock, just
 * before spawn) so callers can time the cold start up to their own first connect.
 */
export async function spawnGateway({
  dataDir,
  config,
  fsync,
  snapshotEvery,
  exposeGc = false,
  timeoutMs = 120_000,
}) {
  const spawnedAt = now();
  const child = track(
    spawn(process.execPath, [...(exposeGc ? ["--expose-gc"] : []), ...EXTRA_NODE_ARGS, GATEWAY_CHILD], {
      cwd: ROOT,
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: {
        ...process.env,
        BENCH_GATEWAY_OPTIONS: JSON.stringify({ dataDir, config, fsync, snapshotEvery }),
      },
    }),
  );
  const ready = await firstMessage(child, ["ready", "failed"], timeoutMs);
  if (ready.type === "failed") throw new Error(`gateway child failed to start: ${ready.error}`);
  const { ask, close } = ipcClient(child);
  return {
    child,
    pid: child.pid,
    url: `ws://127.0.0.1:${ready.port}`,
    token: ready.token,
    spawnedAt,
    /** Child's own clock (ms since its start): modules imported, gateway started. */
    importedMs: ready.importedMs,
    readyMs: ready.readyMs,
    stats: () => ask("stats"),
    resetLoopDelay: () => ask("resetLoopDelay"),
    gc: () => ask("gc"),
    compact: () => ask("compact"),
    rss: () => rssOf(child.pid),
    cpuMs: () => cpuMsOf(child.pid),
    close,
  };
}

/**
 * Spawns a store-only child (bench/lib/store-child.mjs: imports @switchboard/store-fs, opens the
 * store on `dataDir`, answers one `sessions.list` limit 50). Resolves once it reported ready, with
 * `readyAt` (parent clock, when the ready message arrived) beside `spawnedAt`.
 */
export async function spawnStore({ dataDir, exposeGc = false, timeoutMs = 120_000 }) {
  const spawnedAt = now();
  const child = track(
    spawn(process.execPath, [...(exposeGc ? ["--expose-gc"] : []), ...EXTRA_NODE_ARGS, STORE_CHILD], {
      cwd: ROOT,
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: { ...process.env, BENCH_STORE_OPTIONS: JSON.stringify({ dataDir }) },
    }),
  );
  const ready = await firstMessage(child, ["ready", "failed"], timeoutMs);
  const readyAt = now();
  if (ready.type === "failed") throw new Error(`store child failed to open the store: ${ready.error}`);
  const { ask, close } = ipcClient(child);
  return {
    child,
    pid: child.pid,
    spawnedAt,
    readyAt,
    /** Child's own clock (ms since its start): store-fs imported, store opened, first list answered. */
    importedMs: ready.importedMs,
    openedMs: ready.openedMs,
    listedMs: ready.listedMs,
    stats: () => ask("stats"),
    gc: () => ask("gc"),
    rss: () => rssOf(child.pid),
    close,
  };
}

/** Request/response over a child's IPC channel (`{id, type}` -> `{id, ok, result|error}`), and a clean close. */
function ipcClient(child) {
  let nextId = 1;
  const pending = new Map();
  child.on("message", (message) => {
    const resolve = message?.id !== undefined ? pending.get(message.id) : undefined;
    if (resolve) {
      pending.delete(message.id);
      resolve(message);
    }
  });
  const ask = (type) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, (message) => (message.ok ? resolve(message.result) : reject(new Error(message.error))));
      child.send({ id, type });
    });
  return {
    ask,
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      ask("close").catch(() => undefined);
      await exited;
      clearTimeout(timer);
    },
  };
}

// The baseline server: the `ws` package and nothing else, answering each request frame with a
// response frame carrying the same id.
const ECHO_SERVER = `
const { WebSocketServer } = require(process.env.BENCH_WS_PATH);
const server = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false });
server.on("listening", () => process.send({ type: "ready", port: server.address().port }));
server.on("connection", (socket) => {
  socket.on("message", (data) => {
    const frame = JSON.parse(String(data));
    socket.send(JSON.stringify({ type: "res", id: frame.id, ok: true, result: frame.params ?? {} }));
  });
});
process.on("disconnect", () => process.exit(0));
`;

/** Spawns the bare `ws` echo server with `node -e`; resolves once it listens. */
export async function spawnEchoServer({ wsPath }) {
  const spawnedAt = now();
  const child = track(
    spawn(process.execPath, ["-e", ECHO_SERVER], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: { ...process.env, BENCH_WS_PATH: wsPath },
    }),
  );
  const ready = await firstMessage(child, ["ready"], 30_000);
  return {
    child,
    pid: child.pid,
    url: `ws://127.0.0.1:${ready.port}`,
    spawnedAt,
    rss: () => rssOf(child.pid),
    cpuMs: () => cpuMsOf(child.pid),
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
