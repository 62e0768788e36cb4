import type { Logger } from "pino";

/**
 * A warning logged at most once per `intervalMs`, with how many were held back since: an attack of
 * thousands of refused sockets must not turn into thousands of log lines (disk and CPU it would cost).
 */
export function warnThrottle(log: Logger, intervalMs = 10_000, now: () => number = Date.now) {
  let last = Number.NEGATIVE_INFINITY;
  let suppressed = 0;
  return (fields: Record<string, unknown>, message: string): void => {
    const time = now();
    if (time - last < intervalMs) {
      suppressed++;
      return;
    }
    last = time;
    log.warn(suppressed > 0 ? { ...fields, suppressed } : fields, message);
    suppressed = 0;
  };
}
