/**
 * Size limits every store honours and the gateway enforces at input, kept in one place so the
 * input check and the store can never disagree.
 */

/**
 * Largest message the gateway accepts (UTF-8 bytes of the serialised message content). Stores keep
 * and return such a message whole: a tail read always returns its newest match even when that one
 * entry is bigger than the read's `maxBytes`.
 */
export const MAX_MESSAGE_BYTES = 1024 * 1024;

/**
 * Largest message a client or operator may send in (`chat.send`, `agent`): UTF-8 bytes. Half the
 * stored limit and well under the default frame (`limits.maxPayload`, 1 MiB), so an oversized
 * message gets an error naming the field rather than a refused frame.
 */
export const MAX_INPUT_MESSAGE_BYTES = 512 * 1024;

/**
 * Room for an entry's envelope (seq, id, ts, label, provenance) around a message of
 * `MAX_MESSAGE_BYTES`.
 */
export const ENTRY_ENVELOPE_BYTES = 64 * 1024;

/** Default cap on one serialised transcript entry: the largest message plus its envelope. */
export const DEFAULT_MAX_ENTRY_BYTES = MAX_MESSAGE_BYTES + ENTRY_ENVELOPE_BYTES;
