import { z } from "zod";
import { MAX_INPUT_MESSAGE_BYTES } from "../store/limits";

/** UTF-8 length without encoding the string (core runs without Node's Buffer). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      bytes += 4;
      i += 1;
    } else bytes += 3;
  }
  return bytes;
}

const TOO_LONG = `must be at most ${MAX_INPUT_MESSAGE_BYTES} bytes of UTF-8`;

/**
 * Text that becomes a transcript entry or leaves for a channel (an input message, a send's message, a
 * spawn's task, a `message` tool's text): at most `MAX_INPUT_MESSAGE_BYTES` (512 KiB) of UTF-8, so it
 * is refused naming its field before anything is written, never by the store half-way through.
 */
export const InputTextSchema = z
  .string()
  .max(MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG })
  .refine((text) => utf8Length(text) <= MAX_INPUT_MESSAGE_BYTES, { error: TOO_LONG });
