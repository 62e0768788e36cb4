import { formatPath, formatZodIssues, RoleSchema, SwitchboardError } from "@switchboard/core";
import { z } from "zod";
import type { Logger } from "./logger";
import type { WebSocketConstructor } from "./websocket";

/** Kept in step with package.json (a test checks it); sent as `client.version` by default. */
export const SDK_VERSION = "0.1.0";
export const SDK_NAME = "@switchboard/client";

const GatewayUrl = z.string().regex(/^wss?:\/\/[^\s]+$/i, { error: "must be a ws:// or wss:// URL" });
const Delay = z.number().int().min(0).max(3_600_000);
/** setTimeout fires at once for delays above 2^31-1 ms, which would turn a long timeout into none. */
const Timeout = z.number().int().positive().max(2_147_483_647);

export const ReconnectOptionsSchema = z
  .object({
    enabled: z.boolean().default(true),
    initialDelayMs: Delay.default(250),
    maxDelayMs: Delay.default(30_000),
    /** Full jitter: each delay is uniform in [0, the exponential delay]. */
    jitter: z.boolean().default(true),
    /** Consecutive failed attempts before giving up; unlimited when absent. */
    maxAttempts: z.number().int().positive().optional(),
  })
  .refine((value) => value.maxDelayMs >= value.initialDelayMs, {
    error: "maxDelayMs must be at least initialDelayMs",
    path: ["maxDelayMs"],
  });

export const ClientOptionsSchema = z
  .object({
    /**
     * The gateway, or several instances of one cluster: the client connects to the first and, when a
     * connection fails or drops, tries the next (round robin), resuming its event stream there.
     */
    url: z.union([GatewayUrl, z.array(GatewayUrl).min(1, { error: "must list at least one URL" }).max(16)], {
      error: "must be a ws:// or wss:// URL, or a list of them",
    }),
    token: z.string().min(1, { error: "must not be empty" }).max(4096),
    role: RoleSchema,
    clientName: z.string().min(1).max(128).default(SDK_NAME),
    clientVersion: z.string().max(64).default(SDK_VERSION),
    /** Agent ids served by this connection (role `agent` only, required there). */
    agents: z.array(z.string().min(1).max(64)).min(1).max(256).optional(),
    /**
     * Runs this worker executes at once (role `agent` only), announced in `connect`: the gateway
     * never assigns more at a time and keeps the rest queued. An `AgentWorker` sets it for you.
     */
    concurrency: z.number().int().min(1).max(1024).optional(),
    /** The session this connection acts for (role `client` only). */
    sessionKey: z.string().min(1).max(512).optional(),
    requestTimeoutMs: Timeout.default(30_000),
    /** Budget for opening the socket and completing the `connect` handshake, per attempt. */
    connectTimeoutMs: Timeout.default(10_000),
    reconnect: ReconnectOptionsSchema.prefault({}),
    WebSocket: z
      .custom<WebSocketConstructor>((value) => typeof value === "function", {
        error: "must be a WebSocket constructor",
      })
      .optional(),
    logger: z
      .custom<Logger>(
        (value) =>
          typeof value === "object" &&
          value !== null &&
          ["debug", "info", "warn", "error"].every(
            (level) => typeof (value as Record<string, unknown>)[level] === "function",
          ),
        { error: "must have debug, info, warn and error methods" },
      )
      .optional(),
  })
  .superRefine((value, context) => {
    if (value.role === "agent" && value.agents === undefined) {
      context.addIssue({ code: "custom", path: ["agents"], message: "is required for role agent" });
    }
    if (value.role !== "agent" && value.agents !== undefined) {
      context.addIssue({ code: "custom", path: ["agents"], message: "is only allowed for role agent" });
    }
    if (value.role !== "agent" && value.concurrency !== undefined) {
      context.addIssue({ code: "custom", path: ["concurrency"], message: "is only allowed for role agent" });
    }
    if (value.role !== "client" && value.sessionKey !== undefined) {
      context.addIssue({ code: "custom", path: ["sessionKey"], message: "is only allowed for role client" });
    }
  });

export type ClientOptions = z.input<typeof ClientOptionsSchema>;
export type ResolvedClientOptions = z.output<typeof ClientOptionsSchema>;
export type ReconnectOptions = z.input<typeof ReconnectOptionsSchema>;

export function parseClientOptions(options: ClientOptions): ResolvedClientOptions {
  const parsed = ClientOptionsSchema.safeParse(options);
  if (parsed.success) return parsed.data;
  throw new SwitchboardError(
    "INVALID_REQUEST",
    `invalid client options: ${formatZodIssues(parsed.error, "options").join("; ")}`,
    {
      details: {
        issues: parsed.error.issues.map((issue) => ({
          path: formatPath(issue.path as PropertyKey[]),
          message: issue.message,
        })),
      },
    },
  );
}
