// B4: durable transcript appends (fsync on) from 64 concurrent writers, one entry per append call;
// baseline: a loop of `fs.writeSync` + `fs.fsyncSync` per entry on one file.
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { scratchDir } from "../lib/dataset.mjs";
import { loadStoreFs } from "../lib/modules.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { now } from "../lib/stats.mjs";

export const definition = {
  id: "B4",
  title: "durable transcript appends, 64 concurrent writers (fsync on)",
  target: ">= 20 000 entries/s; baseline one writeSync + fsyncSync per entry",
};

const TARGET_RATE = 20_000;
const TEXT = "a typical chat message of a few hundred bytes: ".repeat(6);

const entry = (writer, n) => ({
  type: "message",
  label: "PUBLIC",
  message: {
    role: n % 2 === 0 ? "user" : "assistant",
    content: [{ type: "text", text: `${writer}/${n} ${TEXT}` }],
  },
});

async function appendFor(store, sessionIds, seconds) {
  const deadline = now() + seconds * 1000;
  const started = now();
  let count = 0;
  await Promise.all(
    sessionIds.map(async (sessionId, writer) => {
      for (let n = 0; now() < deadline; n++) {
        await store.transcripts.append(sessionId, [entry(writer, n)]);
        count += 1;
      }
    }),
  );
  return count / ((now() - started) / 1000);
}

function baselineFor(dir, seconds) {
  const file = path.join(dir, "baseline.jsonl");
  const fd = fs.openSync(file, "a", 0o600);
  const line = Buffer.from(
    `${JSON.stringify({ type: "message", seq: 1, id: randomUUID(), ts: Date.now(), label: "PUBLIC", message: entry(0, 0).message })}\n`,
  );
  const deadline = now() + seconds * 1000;
  const started = now();
  let count = 0;
  try {
    while (now() < deadline) {
      fs.writeSync(fd, line);
      fs.fsyncSync(fd);
      count += 1;
    }
  } finally {
    fs.closeSync(fd);
  }
  return count / ((now() - started) / 1000);
}

export async function run(params) {
  const { openFileStore } = await loadStoreFs();
  const dir = scratchDir("b4");
  try {
    const baseline = await repeated(params.reps, () => baselineFor(dir, Math.min(2, params.b4Seconds)));
    const store = await openFileStore({ dataDir: path.join(dir, "store"), fsyncMode: "always" });
    try {
      const sessionIds = [];
      for (let writer = 0; writer < params.b4Writers; writer++) {
        const sessionId = randomUUID();
        await store.transcripts.create({
          sessionId,
          key: `agent:main:bench:writer-${writer}`,
          createdAt: Date.now(),
        });
        sessionIds.push(sessionId);
      }
      await appendFor(store, sessionIds, 0.5);
      const before = await store.stats();
      const concurrent = await repeated(params.reps, () => appendFor(store, sessionIds, params.b4Seconds));
      const after = await store.stats();
      const single = await repeated(params.reps, () =>
        appendFor(store, sessionIds.slice(0, 1), Math.min(2, params.b4Seconds)),
      );
      const perBatch =
        (after.appendedEntries - before.appendedEntries) /
        Math.max(1, after.commitBatches - before.commitBatches);
      return {
        figures: [
          figure({
            label: `${params.b4Writers} writers, 1 entry per append`,
            value: concurrent.value,
            reps: concurrent.reps,
            unit: "/s",
            baseline: baseline.value,
            baselineLabel: "writeSync+fsyncSync loop",
            target: { op: ">=", value: TARGET_RATE },
          }),
          figure({ label: "  entries per commit (group commit)", value: perBatch, unit: "" }),
          figure({
            label: "1 writer, 1 entry per append (info)",
            value: single.value,
            reps: single.reps,
            unit: "/s",
            baseline: baseline.value,
            baselineLabel: "writeSync+fsyncSync loop",
          }),
        ],
        pass: concurrent.value >= TARGET_RATE,
        sizes: {
          writers: params.b4Writers,
          secondsPerRep: params.b4Seconds,
          entryBytes: Buffer.byteLength(JSON.stringify(entry(0, 0))),
        },
        notes: [`data dir on ${dir} (the same disk as the data sets)`],
      };
    } finally {
      await store.close();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
