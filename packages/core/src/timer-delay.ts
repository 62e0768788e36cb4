/**
 * The longest delay `setTimeout` honours: Node fires a longer one after 1 ms (with only a process
 * warning), so a run given a timeout of more than ~24.8 days would end `timeout` at once.
 */
export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/**
 * The delay of a timer meant to fire at `deadline`, within `setTimeout`'s range. A deadline beyond it
 * fires early: the callback checks the clock against the deadline and re-arms.
 */
export function timerDelay(deadline: number, now: number = Date.now()): number {
  return Math.min(Math.max(0, deadline - now), MAX_TIMER_DELAY_MS);
}

/**
 * Where wall-clock `deadline` (ms since the epoch) falls on the monotonic clock (`performance.now()`),
 * as both clocks read now. A timer that re-arms while `performance.now()` is short of it fires at the
 * deadline however the wall clock is stepped meanwhile; one checking `Date.now() < deadline` waited
 * an extra hour when NTP set the clock back an hour.
 */
export function monotonicDeadline(
  deadline: number,
  wallNow: number = Date.now(),
  monotonicNow: number = performance.now(),
): number {
  return monotonicNow + (deadline - wallNow);
}
