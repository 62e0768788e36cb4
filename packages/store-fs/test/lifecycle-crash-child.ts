/**
 * Child process of the reset/delete crash test: sessions are created, written to, reset and
 * deleted (with core's crash-ordered helpers, as the gateway does) until the process is killed,
 * either by the parent's timer or at a chosen file operation (the kill point). One line per event:
 *   BEGIN <worker> <op> <key>          an operation starts (at most one in flight per worker)
 *   NEW <key> <sessionId>              session created
 *   M <key> <sessionId> <seq> <id>     message acknowledged
 *   RESET <key> <old> <new>            reset done
 *   DEL <key> <sessionId>              delete done
 */
import { deleteSession, resetSessionTranscript, type SessionEntry } from "@switchboard/core";
import { openFileStore } from "../src/index";
import { killAtFault, printLine, seededRandom } from "./helpers";

const [dataDir, keysArg, seedArg, killArg] = process.argv.slice(2);
const keysByWorker = JSON.parse(keysArg!) as string[][];
const random = seededRandom(seedArg);
const print = printLine;

const store = await openFileStore({
  dataDir: dataDir!,
  fsyncMode: "always",
  snapshotEvery: 40,
  archiveOrphanTranscripts: true,
});

killAtFault(killArg);
print("ready");

async function worker(index: number, keys: string[]): Promise<void> {
  for (let n = 0; ; n++) {
    const key = keys[Math.floor(random() * keys.length)]!;
    const row = await store.sessions.get(key);
    const dice = random();
    if (!row) {
      print(`BEGIN ${index} new ${key}`);
      const now = Date.now();
      const entry: SessionEntry = {
        key,
        sessionId: crypto.randomUUID(),
        agentId: "main",
        createdAt: now,
        updatedAt: now,
        taint: "PUBLIC",
        clearance: "INTERNAL",
      };
      await store.transcripts.create({ sessionId: entry.sessionId, key, createdAt: now });
      await store.sessions.put(entry);
      print(`NEW ${key} ${entry.sessionId}`);
    } else if (dice < 0.6) {
      print(`BEGIN ${index} append ${key}`);
      const written = await store.transcripts.append(row.sessionId, [
        {
          type: "message",
          label: "INTERNAL",
          message: { role: "user", content: [{ type: "text", text: `w${index}-${n}` }] },
        },
      ]);
      for (const entry of written) print(`M ${key} ${row.sessionId} ${entry.seq} ${entry.id}`);
    } else if (dice < 0.8) {
      print(`BEGIN ${index} reset ${key}`);
      const now = Date.now();
      const next = { ...row, sessionId: crypto.randomUUID(), updatedAt: now };
      const { archiveError } = await resetSessionTranscript(store, row.sessionId, next, now);
      if (archiveError) throw archiveError;
      print(`RESET ${key} ${row.sessionId} ${next.sessionId}`);
    } else {
      print(`BEGIN ${index} delete ${key}`);
      const { archiveError } = await deleteSession(store, row);
      if (archiveError) throw archiveError;
      print(`DEL ${key} ${row.sessionId}`);
    }
  }
}

await Promise.all(keysByWorker.map((keys, index) => worker(index, keys)));
