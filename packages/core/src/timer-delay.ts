/**
 * The longest delay `setTimeout` honours: Node fires a longer one after 1 ms (with only a process
 * warning), so a run given a timeout of more than ~24.8 days would end `timeout` at once.
 */
export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/**
 * The delay of a timer meant to fire at `deadline` (ms since the epoch), within `setTimeout`'s
 * range. A deadline beyond it fires early: the callback checks `Date.now() < deadline` and re-arms.
 */
export function timerDelay(deadline: number, now: number = Date.now()): number {
  return Math.min(Math.max(0, deadline - now), MAX_TIMER_DELAY_MS);
}
