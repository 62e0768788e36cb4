import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DataDirSecrets, dataDirProblem, operatorToken } from "./data-dir-secrets";

function errnoError(code: string, syscall: string, path: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: raw errno text, ${syscall} '${path}'`), { code, syscall, path });
}

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "switchboard-secrets-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("data dir secrets", () => {
  it("creates the operator token with mode 0600 once and reads it back after", async () => {
    const dataDir = join(dir, "fresh");
    const first = await operatorToken(dataDir);
    expect(first.created).toBe(true);
    expect((await stat(join(dataDir, "operator-token"))).mode & 0o777).toBe(0o600);
    expect(await operatorToken(dataDir)).toEqual({ token: first.token, created: false });
    expect((await readFile(join(dataDir, "operator-token"), "utf8")).trim()).toBe(first.token);
  });

  it("names the file in the way when the data dir is a file", async () => {
    const file = join(dir, "a-file");
    await writeFile(file, "x");
    const error = await operatorToken(file).catch((caught: unknown) => caught as Error);
    expect(error).toMatchObject({ code: "UNAVAILABLE" });
    expect((error as Error).message).toBe(
      `cannot open ${join(file, "operator-token")}: a file is in the way (ENOTDIR); ${file} is a file, not a directory: move it away or choose another data dir (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`,
    );
  });
});

describe("dataDirProblem", () => {
  const dataDir = "/srv/switchboard";
  const user = userInfo().username;

  it("explains a refused chmod with the mode, the owner rule and the chown to run", () => {
    expect(dataDirProblem(errnoError("EPERM", "chmod", `${dataDir}/operator-token`), dataDir)?.message).toBe(
      `cannot set permissions 0600 on ${dataDir}/operator-token: operation not permitted (EPERM); the data dir must be owned and writable by the user running switchboard (${user}): chown -R ${user} ${dataDir}, or choose another data dir (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`,
    );
    expect(dataDirProblem(errnoError("EPERM", "chmod", dataDir), dataDir)?.message).toMatch(
      /^cannot set permissions 0700 on \/srv\/switchboard: operation not permitted \(EPERM\)/,
    );
    expect(dataDirProblem(errnoError("EACCES", "mkdir", dataDir), dataDir)?.message).toMatch(
      /^cannot create \/srv\/switchboard: permission denied \(EACCES\); the data dir must be owned and writable/,
    );
  });

  it("explains a full disk and a read-only file system", () => {
    expect(dataDirProblem(errnoError("ENOSPC", "write", `${dataDir}/audit.key`), dataDir)?.message).toBe(
      `cannot write ${dataDir}/audit.key: no space left on the device (ENOSPC); free some space on that disk or choose another data dir (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`,
    );
    expect(dataDirProblem(errnoError("EROFS", "open", `${dataDir}/LOCK`), dataDir)?.message).toBe(
      `cannot open ${dataDir}/LOCK: read-only file system (EROFS); choose a data dir on a writable file system (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`,
    );
  });

  it("leaves other failures alone, including a port that cannot be bound", () => {
    expect(dataDirProblem(errnoError("EACCES", "listen", "127.0.0.1:80"), dataDir)).toBeUndefined();
    expect(dataDirProblem(errnoError("EIO", "read", dataDir), dataDir)).toBeUndefined();
    expect(dataDirProblem(new Error("boom"), dataDir)).toBeUndefined();
  });
});

describe("DataDirSecrets", () => {
  it("serves the same operator token and audit key as the data dir files, across instances", async () => {
    const dataDir = join(dir, "port");
    const first = new DataDirSecrets(dataDir);
    const token = await first.operatorToken();
    const key = await first.auditKey();
    expect(token).toMatch(/^sb_op_/);
    expect(key).toHaveLength(32);
    const second = new DataDirSecrets(dataDir);
    expect(await second.operatorToken()).toBe(token);
    expect(await second.auditKey()).toEqual(key);
    expect((await readFile(join(dataDir, "operator-token"), "utf8")).trim()).toBe(token);
  });
});
