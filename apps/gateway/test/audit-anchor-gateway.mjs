// Child process of the audit anchor crash test (src/reliability/audit-anchor-crash.int.test.ts): a
// real gateway on the file store with fsync on, appending audit records from several concurrent
// loops until the parent kills it with SIGKILL. Prints "ACK <index>" once a record's append
// resolved (durable and anchored).
// Usage: node audit-anchor-gateway.mjs <dataDir>
import { Gateway } from "../dist/index.js";

const dataDir = process.argv[2];
if (!dataDir) {
  process.stderr.write("usage: node audit-anchor-gateway.mjs <dataDir>\n");
  process.exit(2);
}
const gateway = await Gateway.start({ dataDir, port: 0, fsync: "always" });
process.stdout.write("ready\n");
async function loop(worker) {
  for (let n = 0; ; n++) {
    const record = await gateway.audit.append({ kind: "test.note", data: { worker, n } });
    process.stdout.write(`ACK ${record.index}\n`);
  }
}
await Promise.all(Array.from({ length: 6 }, (_, worker) => loop(worker)));
