export interface BackoffOptions {
  initialDelayMs: number;
  maxDelayMs: number;
  jitter: boolean;
}

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential, capped, and with full jitter
 * (uniform in [0, cap]) so that many clients dropped by the same gateway restart do not come
 * back in lock-step.
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions,
  random: () => number = Math.random,
): number {
  // Past 2^30 the cap has long been reached; clamping avoids Infinity * 0 = NaN.
  const exponential = options.initialDelayMs * 2 ** Math.min(Math.max(attempt, 0), 30);
  const cap = Math.min(options.maxDelayMs, exponential);
  return options.jitter ? Math.floor(random() * cap) : cap;
}
