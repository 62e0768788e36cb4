/**
 * Child process of the crash test: opens the store and writes as fast as it can until it is
 * killed, printing one line per acknowledged write:
 *   T <sessionId> <seq> <entryId>   transcript entry
 *   S <key> <updatedAt>             sessions-index row
 *   A <index>                       audit record
 *   R <runId>                       run record
 * stdout is a pipe, which Node writes synchronously on Linux, so a printed line was
 * acknowledged before the process could die.
 */
import { openFileStore } from "../src/index";
import { printLine, seededRandom } from "./helpers";

const [dataDir, sessionsArg, seedArg] = process.argv.slice(2);
const sessionIds = JSON.parse(sessionsArg!) as string[];
const random = seededRandom(seedArg);
const print = printLine;

const store = await openFileStore({
  dataDir: dataDir!,
  fsyncMode: "always",
  commitLogSegmentBytes: 256 * 1024,
  snapshotEvery: 300,
  maxOpenTranscripts: 4,
});
print("ready");

async function transcriptWriter(writer: number): Promise<void> {
  for (let n = 0; ; n++) {
    const sessionId = sessionIds[Math.floor(random() * sessionIds.length)]!;
    const count = 1 + Math.floor(random() * 3);
    const big = random() < 0.01;
    const entries = Array.from({ length: count }, (_, i) => ({
      type: "message" as const,
      label: "INTERNAL" as const,
      message: {
        role: "user" as const,
        content: [
          { type: "text" as const, text: `w${writer}-${n}-${i} ${big ? "B".repeat(16 * 1024) : "payload"}` },
        ],
      },
    }));
    for (const entry of await store.transcripts.append(sessionId, entries))
      print(`T ${sessionId} ${entry.seq} ${entry.id}`);
  }
}

async function indexWriter(writer: number): Promise<void> {
  for (let n = 0; ; n++) {
    const key = `agent:main:crash-${writer}-${n % 50}`;
    const updatedAt = Date.now() * 1000 + n;
    await store.sessions.put({
      key,
      sessionId: sessionIds[writer % sessionIds.length]!,
      agentId: "main",
      createdAt: 1,
      updatedAt,
      taint: "PUBLIC",
      clearance: "INTERNAL",
      displayName: `row ${n}`,
    });
    print(`S ${key} ${updatedAt}`);
  }
}

async function auditWriter(): Promise<void> {
  let index = ((await store.audit.last())?.index ?? -1) + 1;
  for (;;) {
    const hex = (value: number) => value.toString(16).padStart(64, "0");
    await store.audit.append([
      {
        index,
        prevHash: hex(index),
        hash: hex(index + 1),
        kind: "delivery",
        at: Date.now(),
        data: { index },
      },
    ]);
    print(`A ${index}`);
    index++;
  }
}

async function runWriter(): Promise<void> {
  for (;;) {
    const runId = crypto.randomUUID();
    await store.runs.put({
      runId,
      sessionKey: "agent:main:main",
      sessionId: sessionIds[0]!,
      agentId: "main",
      lane: "main",
      status: "running",
      createdAt: Date.now(),
      origin: "chat",
      message: "crash test",
      attempts: 0,
    });
    print(`R ${runId}`);
  }
}

await Promise.all([
  ...Array.from({ length: 48 }, (_, writer) => transcriptWriter(writer)),
  ...Array.from({ length: 4 }, (_, writer) => indexWriter(writer)),
  auditWriter(),
  runWriter(),
]);
