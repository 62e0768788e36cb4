/**
 * Child process of the taint-rise crash test: workers raise sessions' taints with
 * `commitTaintRise` (the audit record chained like the gateway does it), while other workers
 * append plain audit records and transcript messages, until the process is killed by the parent's
 * timer or at a chosen file operation (the kill point). One line per event:
 *   BEGIN <key> <entryId> <level>              a rise is about to be committed
 *   RISE <key> <entryId> <level> <auditIndex>  a rise is acknowledged
 *   AUDIT <index>                              a plain audit record is acknowledged
 */
import { createHmac } from "node:crypto";
import { type AuditRecord, createAuditChain, LEVELS, type Level, type SessionEntry } from "@switchboard/core";
import { openFileStore } from "../src/index";
import { killAtFault, printLine, seededRandom } from "./helpers";

const [dataDir, seedArg, killArg] = process.argv.slice(2);
const random = seededRandom(seedArg);
const print = printLine;

const AUDIT_KEY = new Uint8Array(32).fill(9);
const hmac = (key: Uint8Array, message: string) => createHmac("sha256", key).update(message).digest("hex");

const store = await openFileStore({ dataDir: dataDir!, fsyncMode: "always", snapshotEvery: 40 });

killAtFault(killArg);

const last = await store.audit.last();
const chain = createAuditChain({
  key: AUDIT_KEY,
  hmac,
  ...(last ? { last: { index: last.index, hash: last.hash } } : {}),
});
let order: Promise<unknown> = Promise.resolve();
/** Chains `entry` and hands the record to `persist` in chain order, as the gateway's audit service does. */
function chained<T>(entry: Parameters<typeof chain.next>[0], persist: (record: AuditRecord) => Promise<T>) {
  const record = order.then(() => chain.next(entry));
  order = record.catch(() => undefined);
  return record.then(persist);
}

const busy = new Set<string>();
let created = 0;
async function newSession(): Promise<SessionEntry> {
  const now = Date.now();
  const row: SessionEntry = {
    key: `agent:main:r${process.pid}-${created++}`,
    sessionId: crypto.randomUUID(),
    agentId: "main",
    createdAt: now,
    updatedAt: now,
    taint: "PUBLIC",
    clearance: "RESTRICTED",
  };
  await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: now });
  await store.sessions.put(row);
  return row;
}

print("ready");

async function riser(): Promise<void> {
  for (;;) {
    const { entries } = await store.sessions.list({ limit: 40 });
    const open = entries.filter((row) => row.taint !== "RESTRICTED" && !busy.has(row.key));
    const row =
      open.length > 0 && random() < 0.9 ? open[Math.floor(random() * open.length)]! : await newSession();
    if (busy.has(row.key)) continue;
    busy.add(row.key);
    try {
      const current = (await store.sessions.get(row.key))!;
      const to = LEVELS[LEVELS.indexOf(current.taint) + 1] as Level;
      const id = crypto.randomUUID();
      const taint = { from: current.taint, to, reason: "crash test", source: "child" };
      print(`BEGIN ${row.key} ${id} ${to}`);
      const result = await chained(
        {
          kind: "taint",
          at: Date.now(),
          sessionKey: row.key,
          data: { entryId: id, from: current.taint, to },
        },
        (record) =>
          store
            .commitTaintRise({
              row: { ...current, taint: to, updatedAt: Date.now() },
              entry: { type: "taint", id, label: to, taint },
              audit: record,
            })
            .then(() => record.index),
      );
      print(`RISE ${row.key} ${id} ${to} ${result}`);
    } finally {
      busy.delete(row.key);
    }
  }
}

async function auditor(): Promise<void> {
  for (let n = 0; ; n++) {
    const index = await chained({ kind: "note", at: Date.now(), data: { n } }, (record) =>
      store.audit.append([record]).then(() => record.index),
    );
    print(`AUDIT ${index}`);
  }
}

async function writer(): Promise<void> {
  for (let n = 0; ; n++) {
    const { entries } = await store.sessions.list({ limit: 20 });
    const row = entries[Math.floor(random() * entries.length)];
    if (!row) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      continue;
    }
    await store.transcripts.append(row.sessionId, [
      {
        type: "message",
        label: "PUBLIC",
        message: { role: "user", content: [{ type: "text", text: `m${n}` }] },
      },
    ]);
  }
}

await Promise.all([riser(), riser(), riser(), auditor(), writer()]);
