import { randomBytes } from "node:crypto";
import { statSync } from "node:fs";
import { chmod, mkdir, open, readFile } from "node:fs/promises";
import { userInfo } from "node:os";
import { dirname, join } from "node:path";
import { MIN_AUDIT_KEY_BYTES, SwitchboardError } from "@switchboard/core";
import type { Secrets } from "./ports/secrets";

const DATA_DIR_MODE = 0o700;
const SECRET_MODE = 0o600;

const REASONS: Record<string, string> = {
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EEXIST: "a file is in the way",
  ENOTDIR: "a file is in the way",
  EISDIR: "a directory is in the way",
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  EROFS: "read-only file system",
};

const VERBS: Record<string, string> = {
  mkdir: "create",
  open: "open",
  read: "read",
  write: "write",
  rename: "rename",
  unlink: "remove",
  fsync: "flush",
};

const CHANGE_DIR = "or choose another data dir (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)";

function currentUser(): string {
  try {
    return userInfo().username;
  } catch {
    return "the user running switchboard";
  }
}

/** The nearest existing ancestor of `path` (or `path` itself) that is not a directory. */
function blockingFile(path: string): string | undefined {
  for (let current = path; ; current = dirname(current)) {
    try {
      return statSync(current).isDirectory() ? undefined : current;
    } catch {
      // Missing: look further up.
    }
    if (dirname(current) === current) return undefined;
  }
}

/**
 * A file-system failure while creating or securing the data dir, in words that name the problem and
 * the fix (raw errno text like `EPERM: operation not permitted, chmod '…'` tells neither), or
 * undefined when `error` is no such failure.
 */
export function dataDirProblem(
  error: unknown,
  dataDir: string,
  /** The file being read or written, for errors that carry no path (EISDIR from a read). */
  file?: string,
): SwitchboardError | undefined {
  const { code, syscall, path } = (error ?? {}) as NodeJS.ErrnoException;
  if (code === undefined || !(code in REASONS)) return undefined;
  // EACCES from listen/bind is about the port, not the data dir.
  if (syscall === "listen" || syscall === "bind" || syscall === "connect") return undefined;
  // Without a path it is unknown which directory is in the way, and it is not the data dir.
  if (code === "EISDIR" && (path ?? file) === undefined) return undefined;
  const target = path ?? file ?? dataDir;
  const verb =
    syscall === "chmod"
      ? `set permissions ${(target === dataDir ? DATA_DIR_MODE : SECRET_MODE).toString(8).padStart(4, "0")} on`
      : (VERBS[syscall ?? ""] ?? "use");
  const what = `cannot ${verb} ${target}: ${REASONS[code]} (${code})`;
  let fix: string;
  switch (code) {
    case "EACCES":
    case "EPERM": {
      const user = currentUser();
      fix = `the data dir must be owned and writable by the user running switchboard (${user}): chown -R ${user} ${dataDir}, ${CHANGE_DIR}`;
      break;
    }
    case "EEXIST":
    case "ENOTDIR": {
      const file = blockingFile(target) ?? target;
      fix = `${file} is a file, not a directory: move it away ${CHANGE_DIR}`;
      break;
    }
    case "EISDIR":
      fix = `${target} is a directory, not a file: move it away (a missing secret file is created anew at start) ${CHANGE_DIR}`;
      break;
    case "ENOSPC":
    case "EDQUOT":
      fix = `free some space on that disk ${CHANGE_DIR}`;
      break;
    default:
      fix = `choose a data dir on a writable file system (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`;
  }
  return new SwitchboardError("UNAVAILABLE", `${what}; ${fix}`, {
    cause: error,
    details: { code, path: target, dataDir },
  });
}

interface ReadOrCreateOptions {
  /** The file must be there: the error to refuse a missing one with. */
  mustExist?: (path: string) => SwitchboardError;
}

/** Reads a secret file from the data dir, creating it (mode 0600, durably) on first start. */
async function readOrCreate(
  dataDir: string,
  name: string,
  create: () => Buffer,
  options: ReadOrCreateOptions = {},
): Promise<{ value: Buffer; created: boolean }> {
  try {
    return await readOrCreateRaw(dataDir, name, create, options);
  } catch (error) {
    throw dataDirProblem(error, dataDir, join(dataDir, name)) ?? error;
  }
}

async function readOrCreateRaw(
  dataDir: string,
  name: string,
  create: () => Buffer,
  options: ReadOrCreateOptions,
): Promise<{ value: Buffer; created: boolean }> {
  const path = join(dataDir, name);
  try {
    return { value: await readFile(path), created: false };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  if (options.mustExist) throw options.mustExist(path);
  await mkdir(dataDir, { recursive: true, mode: DATA_DIR_MODE });
  const value = create();
  let file: Awaited<ReturnType<typeof open>>;
  try {
    file = await open(path, "wx", SECRET_MODE);
  } catch (error) {
    // Another starter won the race: use what it wrote.
    if ((error as NodeJS.ErrnoException).code === "EEXIST")
      return { value: await readFile(path), created: false };
    throw error;
  }
  // Durable, name and bytes, before anything depends on it: the first audit records are written
  // (O_DSYNC) right after, and a power cut must not leave them chained with a key that is gone.
  try {
    await file.writeFile(value);
    await file.sync();
  } finally {
    await file.close();
  }
  await chmod(path, SECRET_MODE);
  const dir = await open(dataDir, "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return { value, created: true };
}

export async function operatorToken(dataDir: string): Promise<{ token: string; created: boolean }> {
  const { value, created } = await readOrCreate(dataDir, "operator-token", () =>
    Buffer.from(`sb_op_${randomBytes(24).toString("base64url")}\n`),
  );
  const token = value.toString("utf8").trim();
  const damage = operatorTokenDamage(token, join(dataDir, "operator-token"));
  if (damage) throw new SwitchboardError("UNAVAILABLE", `${damage.problem}; ${damage.fix}`);
  return { token, created };
}

/** A secret file that reads but cannot be what it should be, and what to do about it. */
export interface SecretDamage {
  problem: string;
  fix: string;
}

export function operatorTokenDamage(token: string, path: string): SecretDamage | undefined {
  // An empty token matches no client's, yet would be printed as the token to use.
  if (token !== "") return undefined;
  return {
    problem: `the operator token file ${path} is empty`,
    fix: `delete it and start again to generate a new token (clients using the old one need the new one)`,
  };
}

export async function auditKey(dataDir: string, options: { chained?: boolean } = {}): Promise<Uint8Array> {
  const { value } = await readOrCreate(
    dataDir,
    "audit.key",
    () => randomBytes(32),
    options.chained ? { mustExist: missingAuditKey } : {},
  );
  // Checked here, not left to the audit chain: its INVALID_REQUEST reads as a usage error (exit 2).
  const damage = auditKeyDamage(value.length, join(dataDir, "audit.key"));
  if (damage) throw new SwitchboardError("UNAVAILABLE", `${damage.problem}; ${damage.fix}`);
  return new Uint8Array(value);
}

export function auditKeyDamage(length: number, path: string): SecretDamage | undefined {
  if (length >= MIN_AUDIT_KEY_BYTES) return undefined;
  return {
    problem: `the audit key file ${path} holds ${length} bytes, fewer than a key's ${MIN_AUDIT_KEY_BYTES}: it is damaged`,
    fix: "restore it from a backup (the audit log is chained with it), or delete it to start with a new key (`switchboard audit verify` then fails on the records made before)",
  };
}

function missingAuditKey(path: string): SwitchboardError {
  return new SwitchboardError(
    "UNAVAILABLE",
    `the audit key file ${path} is missing, but the audit log holds records chained with it; restore it from a backup. To go on without it, write a new key there yourself (head -c 32 /dev/urandom > ${path}): \`switchboard audit verify\` then fails on the records made before`,
    { details: { path } },
  );
}

/** {@link Secrets} as files in the data dir, created (mode 0600) on first start. */
export class DataDirSecrets implements Secrets {
  constructor(private readonly dataDir: string) {}

  async operatorToken(): Promise<string> {
    return (await operatorToken(this.dataDir)).token;
  }

  auditKey(options?: { chained?: boolean }): Promise<Uint8Array> {
    return auditKey(this.dataDir, options);
  }
}
