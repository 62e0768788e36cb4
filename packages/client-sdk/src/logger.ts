/**
 * The SDK logs through core's fields-first `Logger` (pino's signature, so a pino logger fits as
 * it is). The SDK is silent unless one is passed.
 */
export { type Logger, silentLogger } from "@switchboard/core";
