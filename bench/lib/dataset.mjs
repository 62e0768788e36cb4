// Benchmark data sets: file-store data dirs with N sessions (each with a small transcript) and,
// on demand, large "history" transcripts of a given size. They are generated once into
// `bench/.data/` (or BENCH_DATA_DIR) and reused while their manifest matches this generator.
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { BENCH_DIR, loadCore, loadStoreFs, setting } from "./modules.mjs";
import { formatBytes, now } from "./stats.mjs";

/** Bump when the generated data changes shape: older data sets are then regenerated. */
const GENERATOR_VERSION = 2;
const MANIFEST = "bench-manifest.json";
const DAY = 86_400_000;
/** Rows' `updatedAt` are spread over this window before the generation time. */
export const ACTIVITY_WINDOW_MS = 30 * DAY;

export const DATA_ROOT = path.resolve(setting("BENCH_DATA_DIR") ?? path.join(BENCH_DIR, ".data"));

const log = (message) => process.stderr.write(`  [data] ${message}\n`);

/** A small deterministic PRNG (mulberry32), so data sets have the same shape every time. */
export function prng(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const AGENTS = ["main", "main", "main", "main", "main", "main", "research", "research", "ops", "main"];

/**
 * The key of session `index` of a data set: a realistic mix of direct chats, groups, sub-agents,
 * cron and hook sessions (indexes 0-2 are the agents' main sessions).
 */
export function sessionKeyOf(index) {
  if (index === 0) return "agent:main:main";
  if (index === 1) return "agent:research:main";
  if (index === 2) return "agent:ops:main";
  const agent = AGENTS[index % AGENTS.length];
  const tag = index.toString(36);
  switch (index % 20) {
    case 0:
      return `agent:${agent}:cron:job-${tag}`;
    case 1:
      return `agent:${agent}:hook:${tag}`;
    case 2:
    case 3:
      return `agent:${agent}:subagent:${tag}`;
    case 4:
    case 5:
    case 6:
    case 7:
      return `agent:${agent}:discord:group:g${tag}`;
    default:
      return `agent:${agent}:telegram:dm:u${tag}`;
  }
}

function sessionRow(index, generatedAt, random) {
  const key = sessionKeyOf(index);
  const agentId = key.split(":")[1];
  const updatedAt = generatedAt - Math.floor(random() * ACTIVITY_WINDOW_MS);
  const row = {
    key,
    sessionId: randomUUID(),
    agentId,
    createdAt: updatedAt - Math.floor(random() * ACTIVITY_WINDOW_MS),
    updatedAt,
    taint: random() < 0.8 ? "PUBLIC" : "INTERNAL",
    clearance: "INTERNAL",
    model: "anthropic/claude-sonnet-4-5",
    totalTokens: Math.floor(random() * 200_000),
  };
  const rest = key.split(":").slice(2).join(":");
  if (rest.startsWith("discord:group:")) {
    Object.assign(row, { channel: "discord", chatType: "group", displayName: `discord group ${index}` });
  } else if (rest.startsWith("telegram:dm:")) {
    Object.assign(row, {
      channel: "telegram",
      chatType: "direct",
      displayName: `Telegram user ${index}`,
      lastChannel: "telegram",
      lastTo: `u${index.toString(36)}`,
      deliveryContext: { channel: "telegram", to: `u${index.toString(36)}` },
    });
  } else if (rest.startsWith("subagent:")) {
    Object.assign(row, { spawnedBy: `agent:${agentId}:main`, spawnDepth: 1 });
    if (random() < 0.3) row.label = `task-${index.toString(36)}`;
  }
  return row;
}

// ---- transcript lines ------------------------------------------------------------------------

const WORDS =
  "the a gateway session agent message reply tool result label taint channel clearance transcript history send wait spawn announce cron hook group direct user assistant system store index journal snapshot append read write durable fsync commit batch latency throughput memory worker run queue lane policy rule block allow deny public internal confidential restricted"
    .split(" ")
    .filter(Boolean);

function textPool(random, count) {
  const pool = [];
  for (let i = 0; i < count; i++) {
    // Lengths from ~40 to ~1500 characters, most of them short: like chat messages.
    const length = Math.floor(40 + 1460 * random() ** 2.2);
    let text = "";
    while (text.length < length) text += `${WORDS[Math.floor(random() * WORDS.length)]} `;
    pool.push(text.slice(0, length).trim());
  }
  return pool;
}

/**
 * Produces valid transcript entry lines in the store's stored field order
 * (`type, seq, id, ts, label, runId, provenance, message`), a conversation of user and assistant
 * messages with occasional tool calls.
 */
export class ConversationWriter {
  constructor(seed = 1) {
    this.random = prng(seed);
    this.texts = textPool(this.random, 1024);
    this.turn = 0;
  }

  /** The lines of the next turn, starting at `seq` (returned with the seq after them). */
  nextTurn(seq, ts) {
    const random = this.random;
    const runId = randomUUID();
    const pick = () => this.texts[Math.floor(random() * this.texts.length)];
    const lines = [];
    const push = (fields) => {
      lines.push(JSON.stringify({ type: "message", seq, id: randomUUID(), ts, ...fields }));
      seq += 1;
    };
    push({
      label: "PUBLIC",
      runId,
      provenance: { kind: "user", channel: "telegram" },
      message: { role: "user", content: [{ type: "text", text: pick() }] },
    });
    if (this.turn % 5 === 4) {
      const toolCallId = randomUUID();
      push({
        label: "PUBLIC",
        runId,
        message: {
          role: "toolCall",
          content: [{ type: "toolCall", id: toolCallId, name: "sessions_list", args: { limit: 10 } }],
        },
      });
      push({
        label: "INTERNAL",
        runId,
        message: {
          role: "toolResult",
          content: [
            { type: "toolResult", toolCallId, name: "sessions_list", result: { status: "ok", text: pick() } },
          ],
        },
      });
    }
    push({
      label: "PUBLIC",
      runId,
      message: { role: "assistant", content: [{ type: "text", text: pick() }] },
    });
    this.turn += 1;
    return { lines, seq };
  }
}

// ---- data sets -------------------------------------------------------------------------------

function readManifest(dataDir) {
  try {
    const manifest = JSON.parse(fs.readFileSync(path.join(dataDir, MANIFEST), "utf8"));
    return manifest.version === GENERATOR_VERSION ? manifest : undefined;
  } catch {
    return undefined;
  }
}

function writeManifest(dataDir, manifest) {
  const file = path.join(dataDir, MANIFEST);
  fs.writeFileSync(`${file}.tmp`, `${JSON.stringify(manifest, null, 2)}\n`);
  fs.renameSync(`${file}.tmp`, file);
}

/** Writes a small transcript (header + one exchange) straight to disk, in the store's format. */
function writeSmallTranscript(transcriptsDir, row, header, conversation) {
  const { lines } = conversation.nextTurn(1, row.updatedAt);
  const file = path.join(transcriptsDir, `${row.sessionId}.jsonl`);
  fs.writeFileSync(file, `${JSON.stringify(header)}\n${lines.join("\n")}\n`, { mode: 0o600 });
}

/**
 * A data dir holding `count` sessions, each with a small transcript. Reused when present;
 * returns `{ dataDir, manifest }`.
 */
export async function ensureSessionsDataset(count) {
  const dataDir = path.join(DATA_ROOT, `sessions-${count}`);
  const existing = readManifest(dataDir);
  if (existing?.sessions === count) return { dataDir, manifest: existing };

  const started = now();
  log(`generating ${count.toLocaleString("en-US")} sessions in ${dataDir}`);
  fs.rmSync(dataDir, { recursive: true, force: true });
  const { openFileStore } = await loadStoreFs();
  const { buildTranscriptHeader, TranscriptEntrySchema } = await loadCore();
  const generatedAt = Date.now();
  const random = prng(count);
  const conversation = new ConversationWriter(count);
  const store = await openFileStore({ dataDir, fsyncMode: "none" });
  const transcriptsDir = path.dirname(store.transcripts.locate(randomUUID()));
  try {
    let pending = [];
    for (let index = 0; index < count; index++) {
      const row = sessionRow(index, generatedAt, random);
      pending.push(store.sessions.put(row));
      const header = buildTranscriptHeader({
        sessionId: row.sessionId,
        key: row.key,
        createdAt: row.createdAt,
      });
      writeSmallTranscript(transcriptsDir, row, header, conversation);
      if (pending.length >= 2000) {
        await Promise.all(pending);
        pending = [];
      }
    }
    await Promise.all(pending);
    await store.compact();
    // The store must read what was written straight to disk.
    const sample = await store.sessions.get(sessionKeyOf(count - 1));
    const read = await store.transcripts.read(sample.sessionId, { limit: 10 });
    for (const entry of read.entries) TranscriptEntrySchema.parse(entry);
    if (read.entries.length < 2) throw new Error("generated small transcript did not read back");
  } finally {
    await store.close();
  }
  const manifest = { version: GENERATOR_VERSION, sessions: count, generatedAt, histories: {} };
  writeManifest(dataDir, manifest);
  log(`  done in ${((now() - started) / 1000).toFixed(1)} s`);
  return { dataDir, manifest };
}

/** The session key of the history transcript of `bytes` bytes. */
export const historyKeyOf = (bytes) => `agent:main:bench:history-${bytes}`;

/**
 * Adds (once) a session whose transcript is about `bytes` long to a data set made by
 * {@link ensureSessionsDataset}. The first and last entries go through the store API; the bulk is
 * written with large sequential writes in the same line format.
 */
export async function ensureHistoryTranscript(dataset, bytes) {
  const { dataDir } = dataset;
  const known = dataset.manifest.histories[bytes];
  if (known && fs.existsSync(known.path) && fs.statSync(known.path).size >= known.bytes) return known;

  const started = now();
  log(`generating a ${formatBytes(bytes)} transcript in ${dataDir}`);
  const { openFileStore } = await loadStoreFs();
  const { TranscriptEntrySchema } = await loadCore();
  const key = historyKeyOf(bytes);
  const conversation = new ConversationWriter(bytes % 1_000_003);
  const createdAt = Date.now();
  let sessionId;
  let filePath;
  let store = await openFileStore({ dataDir, fsyncMode: "none" });
  try {
    const previous = await store.sessions.get(key);
    if (previous) await store.transcripts.remove(previous.sessionId);
    sessionId = randomUUID();
    await store.sessions.put({
      key,
      sessionId,
      agentId: "main",
      createdAt,
      updatedAt: createdAt,
      taint: "PUBLIC",
      clearance: "INTERNAL",
      displayName: `history ${formatBytes(bytes)}`,
    });
    await store.transcripts.create({ sessionId, key, createdAt });
    await store.transcripts.append(sessionId, [
      {
        type: "message",
        label: "PUBLIC",
        message: { role: "user", content: [{ type: "text", text: "first" }] },
      },
    ]);
    filePath = store.transcripts.locate(sessionId);
  } finally {
    await store.close();
  }

  // Bulk: whole turns, written in ~8 MiB chunks.
  const fd = fs.openSync(filePath, "a");
  let size = fs.fstatSync(fd).size;
  let seq = 2;
  let entries = 1;
  try {
    let chunk = [];
    let chunkBytes = 0;
    const flush = () => {
      const buffer = Buffer.from(`${chunk.join("\n")}\n`);
      fs.writeSync(fd, buffer);
      size += buffer.length;
      chunk = [];
      chunkBytes = 0;
    };
    let lastReport = now();
    while (size + chunkBytes < bytes) {
      const turn = conversation.nextTurn(seq, createdAt + seq);
      entries += turn.lines.length;
      seq = turn.seq;
      for (const line of turn.lines) {
        chunk.push(line);
        chunkBytes += line.length + 1;
      }
      if (chunkBytes >= 8 * 1024 * 1024) flush();
      if (now() - lastReport > 10_000) {
        lastReport = now();
        log(`  ${formatBytes(size)} of ${formatBytes(bytes)}`);
      }
    }
    if (chunk.length > 0) flush();
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }

  // The store must accept the file: its tail, its last seq, further appends.
  store = await openFileStore({ dataDir, fsyncMode: "none" });
  try {
    const [appended] = await store.transcripts.append(sessionId, [
      {
        type: "message",
        label: "PUBLIC",
        message: { role: "assistant", content: [{ type: "text", text: "last" }] },
      },
    ]);
    entries += 1;
    if (appended.seq !== seq)
      throw new Error(`generated transcript: expected seq ${seq}, store assigned ${appended.seq}`);
    const read = await store.transcripts.read(sessionId, { limit: 50 });
    if (read.entries.length !== 50 || read.entries.at(-1).seq !== seq) {
      throw new Error("generated transcript does not read back through the store");
    }
    for (const entry of read.entries) TranscriptEntrySchema.parse(entry);
  } finally {
    await store.close();
  }
  const record = { key, sessionId, path: filePath, bytes: fs.statSync(filePath).size, entries };
  dataset.manifest.histories[bytes] = record;
  writeManifest(dataDir, dataset.manifest);
  log(`  done in ${((now() - started) / 1000).toFixed(1)} s (${entries.toLocaleString("en-US")} entries)`);
  return record;
}

/** Total bytes of the transcripts of a data dir. */
export function transcriptBytes(dataDir) {
  const dir = path.join(dataDir, "transcripts");
  let total = 0;
  for (const name of fs.readdirSync(dir)) total += fs.statSync(path.join(dir, name)).size;
  return total;
}

/** A fresh, empty scratch directory under the data root (removed by the caller). */
export function scratchDir(name) {
  const dir = path.join(DATA_ROOT, "scratch", `${name}-${process.pid}-${Date.now()}`);
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}
