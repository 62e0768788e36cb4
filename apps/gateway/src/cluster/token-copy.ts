import { chmod, mkdir, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";

/**
 * Writes the cluster's operator token into this instance's data dir (`operator-token`, mode 0600),
 * so the CLI on the same machine finds it as it does for a single process. A copy only: the token
 * lives in the database and every start overwrites the copy with it (renamed into place, so a CLI
 * reading it never sees half a file).
 */
export async function writeOperatorTokenCopy(dataDir: string, token: string): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "operator-token");
  const temporary = `${path}.${process.pid}.tmp`;
  await writeFile(temporary, `${token}\n`, { mode: 0o600 });
  await chmod(temporary, 0o600);
  await rename(temporary, path);
}
