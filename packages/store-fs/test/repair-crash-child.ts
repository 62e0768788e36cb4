/**
 * Child process of the repair crash test: runs `doctor --repair` on the data dir and is killed
 * (SIGKILL) at a chosen file operation of it (the kill point, see `killAtFault`). Prints
 * `repaired <actions>` if it gets to the end.
 */
import { repairDataDir } from "../src/index";
import { killAtFault, printLine } from "./helpers";

const [dataDir, killArg] = process.argv.slice(2);
killAtFault(killArg);
const result = await repairDataDir(dataDir!);
printLine(`repaired ${result.actions.length}`);
