import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** Reads a secret file from the data dir, creating it (mode 0600) on first start. */
async function readOrCreate(
  dataDir: string,
  name: string,
  create: () => Buffer,
): Promise<{ value: Buffer; created: boolean }> {
  const path = join(dataDir, name);
  try {
    return { value: await readFile(path), created: false };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const value = create();
  try {
    await writeFile(path, value, { mode: 0o600, flag: "wx" });
  } catch (error) {
    // Another starter won the race: use what it wrote.
    if ((error as NodeJS.ErrnoException).code === "EEXIST")
      return { value: await readFile(path), created: false };
    throw error;
  }
  await chmod(path, 0o600);
  return { value, created: true };
}

export async function operatorToken(dataDir: string): Promise<{ token: string; created: boolean }> {
  const { value, created } = await readOrCreate(dataDir, "operator-token", () =>
    Buffer.from(`sb_op_${randomBytes(24).toString("base64url")}\n`),
  );
  return { token: value.toString("utf8").trim(), created };
}

export async function auditKey(dataDir: string): Promise<Uint8Array> {
  const { value } = await readOrCreate(dataDir, "audit.key", () => randomBytes(32));
  return new Uint8Array(value);
}
