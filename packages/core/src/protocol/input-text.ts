import { z } from "zod";
import { MAX_INPUT_MESSAGE_BYTES } from "../store/limits";
import { utf8ByteLength } from "../store/store-rules";

const TOO_LONG = `must be at most ${MAX_INPUT_MESSAGE_BYTES} bytes of UTF-8`;

/**
 * Text that becomes a transcript entry or leaves for a channel (an input message, a send's message, a
 * spawn's task, a `message` tool's text): at most `MAX_INPUT_MESSAGE_BYTES` (512 KiB) of UTF-8, so it
 * is refused naming its field before anything is written, never by the store half-way through.
 */
export const InputTextSchema = z
  .string()
  .max(MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG })
  .refine((text) => utf8ByteLength(text) <= MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG });
