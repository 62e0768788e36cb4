import { readFileSync } from "node:fs";

export interface OpenFileLimit {
  soft: number;
  hard: number;
}

/**
 * Reads the process's `nofile` limit from /proc/self/limits (Linux); `undefined` elsewhere or when it is
 * unlimited. Node has no setrlimit, but on POSIX it raises its own soft limit to the hard limit at
 * start-up, so the soft limit read here is already as high as an unprivileged process can get it.
 */
export function readOpenFileLimit(limitsText?: string): OpenFileLimit | undefined {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = readFileSync("/proc/self/limits", "utf8");
    } catch {
      return undefined;
    }
  }
  const match = /^Max open files\s+(\S+)\s+(\S+)/m.exec(text);
  if (!match) return undefined;
  const soft = Number(match[1]);
  const hard = Number(match[2]);
  if (!Number.isSafeInteger(soft) || soft <= 0) return undefined;
  return { soft, hard: Number.isSafeInteger(hard) ? hard : soft };
}

/** Descriptors kept for the store, logs and sockets still in their handshake, beyond the connection cap. */
export const RESERVED_FILES = 256;
export const DEFAULT_MAX_CONNECTIONS = 4096;

/**
 * The default connection cap: 4096, or three quarters of what the open-file limit leaves after the
 * reserve, so the gateway refuses connections with a close code before `accept` or a transcript open
 * fails with EMFILE.
 */
export function defaultMaxConnections(limit: OpenFileLimit | undefined): number {
  if (!limit) return DEFAULT_MAX_CONNECTIONS;
  return Math.max(16, Math.min(DEFAULT_MAX_CONNECTIONS, Math.floor((limit.soft - RESERVED_FILES) * 0.75)));
}
