import { describe, expect, it } from "vitest";
import { connectionFault, isDroppedConnection, toStoreError } from "./errors";
import { describeTarget, redactUrl } from "./url";

const where = { action: "reading a session", target: "db.example:5432/app", password: "hunter2" };

describe("driver errors", () => {
  it("maps an unreachable or restarting server to UNAVAILABLE (retryable), naming cause and target", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:5432"), { code: "ECONNREFUSED" });
    const shutdown = Object.assign(new Error("terminating connection due to administrator command"), {
      code: "57P01",
    });
    for (const error of [refused, shutdown, new Error("Connection terminated unexpectedly")]) {
      const mapped = toStoreError(error, where);
      expect(mapped).toMatchObject({ code: "UNAVAILABLE", retryable: true });
      expect(mapped.message).toContain("db.example:5432/app");
      expect(mapped.message).toContain("reading a session");
    }
    expect(connectionFault(shutdown)).toMatch(/57P01/);
    expect(connectionFault(Object.assign(new Error("x"), { code: "08006" }))).toMatch(/08006/);
  });

  it("keeps request errors apart: a SQL error is INTERNAL with its SQLSTATE, and the password is scrubbed", () => {
    const syntax = Object.assign(new Error('syntax error near "hunter2"'), { code: "42601" });
    const mapped = toStoreError(syntax, where);
    expect(mapped.code).toBe("INTERNAL");
    expect(mapped.message).toContain("SQLSTATE 42601");
    expect(mapped.message).not.toContain("hunter2");
    expect(connectionFault(Object.assign(new Error("duplicate"), { code: "23505" }))).toBeUndefined();
  });
});

describe("which failed reads are tried again", () => {
  it("retries a dropped connection, never a timeout or a request error", () => {
    const failure = (message: string, code?: string) =>
      Object.assign(new Error(message), code ? { code } : {});
    expect(isDroppedConnection(failure("Connection terminated unexpectedly"))).toBe(true);
    expect(isDroppedConnection(failure("terminating connection due to administrator command", "57P01"))).toBe(
      true,
    );
    expect(isDroppedConnection(failure("read ECONNRESET", "ECONNRESET"))).toBe(true);
    expect(isDroppedConnection(failure("canceling statement due to statement timeout", "57014"))).toBe(false);
    expect(isDroppedConnection(failure("Query read timeout"))).toBe(false);
    expect(isDroppedConnection(failure("timeout exceeded when trying to connect"))).toBe(false);
    expect(isDroppedConnection(failure("duplicate key", "23505"))).toBe(false);
  });
});

describe("connection URLs", () => {
  it("hides the password and keeps the rest", () => {
    expect(redactUrl("postgres://app:s3cret@db:5433/prod?sslmode=require")).toBe(
      "postgres://app:***@db:5433/prod?sslmode=require",
    );
    expect(redactUrl("postgres://app@db/prod")).toBe("postgres://app@db/prod");
    expect(redactUrl("postgres://%zz:pw@")).not.toContain("pw");
    expect(describeTarget("postgres://app:s3cret@db/prod")).toBe("db:5432/prod");
  });
});
