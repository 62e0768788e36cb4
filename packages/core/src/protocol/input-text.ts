import { z } from "zod";
import { MAX_INPUT_MESSAGE_BYTES, MAX_MESSAGE_BYTES } from "../store/limits";
import { utf8ByteLength } from "../store/store-rules";

const TOO_LONG = `must be at most ${MAX_INPUT_MESSAGE_BYTES} bytes of UTF-8`;

/**
 * Text that becomes a transcript entry or leaves for a channel (an input message, a send's message, a
 * spawn's task, a `message` tool's text): at most `MAX_INPUT_MESSAGE_BYTES` (512 KiB) of UTF-8, so it
 * is refused naming its field before anything is written, never by the store half-way through.
 */
export const InputTextSchema = z
  .string()
  // `abort`: a text over the limit in characters is over it in bytes too; one message is enough.
  .max(MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG, abort: true })
  .refine((text) => utf8ByteLength(text) <= MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG });

const REPLY_TOO_LONG = `must be at most ${MAX_MESSAGE_BYTES} bytes of UTF-8, counted JSON-encoded as it is stored`;

/**
 * A worker's reply (`run.complete`): it becomes one transcript entry, so it must fit the store's
 * message limit as stored (JSON-encoded: quotes and control characters take more room). Refused
 * naming `reply` before the run ends; before, a reply past it (with a raised `maxPayload`) was
 * acknowledged and reported `ok` while the store refused its entry.
 */
export const ReplyTextSchema = z
  .string()
  .max(MAX_MESSAGE_BYTES, { error: REPLY_TOO_LONG, abort: true })
  .refine((text) => utf8ByteLength(JSON.stringify(text)) - 2 <= MAX_MESSAGE_BYTES, { error: REPLY_TOO_LONG });
