import type { Logger } from "@switchboard/core";

/**
 * The agent logs through core's fields-first `Logger`; a pino logger satisfies it as it is.
 * Libraries stay silent unless a logger is passed in.
 */
export type AgentLogger = Logger;

export { silentLogger } from "@switchboard/core";
