/**
 * The few logging calls the agent makes. pino's logger satisfies it; libraries stay silent unless a
 * logger is passed in.
 */
export interface AgentLogger {
  debug(details: Record<string, unknown>, message?: string): void;
  warn(details: Record<string, unknown>, message?: string): void;
}

export const silentLogger: AgentLogger = {
  debug() {},
  warn() {},
};
