import { z } from "zod";
import { WireErrorSchema } from "../errors";

export const PROTOCOL_VERSION = 1;

export const RequestFrameSchema = z.object({
  type: z.literal("req"),
  id: z.string().min(1).max(128),
  method: z.string().min(1).max(128),
  params: z.record(z.string(), z.unknown()).optional(),
});
export type RequestFrame = z.infer<typeof RequestFrameSchema>;

export const ResponseOkFrameSchema = z.object({
  type: z.literal("res"),
  id: z.string(),
  ok: z.literal(true),
  result: z.record(z.string(), z.unknown()),
});
export const ResponseErrorFrameSchema = z.object({
  type: z.literal("res"),
  id: z.string().nullable(),
  ok: z.literal(false),
  error: WireErrorSchema,
});
export const ResponseFrameSchema = z.discriminatedUnion("ok", [
  ResponseOkFrameSchema,
  ResponseErrorFrameSchema,
]);
export type ResponseFrame = z.infer<typeof ResponseFrameSchema>;

/**
 * `seq` is gateway-wide and strictly increasing across restarts (kill -9 included): the gateway
 * durably reserves a block of numbers before handing any of them out. Frames addressed to one
 * connection (`run.assigned`) take a seq too but are not part of the resumable stream: a client
 * must never drop them by its resume cursor (they are de-duplicated by `runId`).
 */
export const EventFrameSchema = z.object({
  type: z.literal("event"),
  event: z.string(),
  seq: z.number().int().nonnegative(),
  payload: z.record(z.string(), z.unknown()),
});
export type EventFrame = z.infer<typeof EventFrameSchema>;

/** Frames a server sends. Responses are told apart by `ok` after `type`. */
export const ServerFrameSchema = z.union([ResponseOkFrameSchema, ResponseErrorFrameSchema, EventFrameSchema]);
export type ServerFrame = z.infer<typeof ServerFrameSchema>;

/** WebSocket close codes the gateway uses. */
export const CloseCodes = {
  /** No `connect` request within the handshake window. */
  handshakeTimeout: 4001,
  /** A protocol violation severe enough to drop the peer (e.g. a second `connect`). */
  protocolError: 4002,
  /** Bad token. */
  unauthorized: 4003,
  /** A connection cap (`limits.maxConnections` or `limits.maxConnectionsPerAddress`) is reached; retry later. */
  connectionLimit: 4004,
  /** More than `limits.maxPreConnectBytes` received before `connect` succeeded (standard "message too big"). */
  messageTooBig: 1009,
  /** Unsent buffer above `maxBufferedBytes`. */
  tryAgainLater: 1013,
  goingAway: 1001,
} as const;
