import type { Logger } from "@switchboard/core";

/**
 * Where the store reports what it did on its own (torn tails cut, compactions): core's fields-first
 * `Logger`, so the gateway's pino child is passed as it is and keeps every field. Silent by default.
 */
export type StoreLogger = Logger;

export { silentLogger } from "@switchboard/core";
