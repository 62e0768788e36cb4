import { SwitchboardError } from "@switchboard/core";

/** The abort reason used when the run's own deadline passes. */
export class DeadlineExceededError extends Error {
  constructor() {
    super("deadline exceeded");
    this.name = "DeadlineExceededError";
  }
}

/** Timers beyond this are not armed (setTimeout overflows); such a deadline is days away anyway. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * A signal that aborts when the caller's does or when the run's deadline passes, whichever is
 * first. `dispose` releases the timer and listener once the run is over.
 */
export function runSignal(
  parent: AbortSignal,
  deadline: number | undefined,
  now: () => number = Date.now,
): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const onAbort = () => controller.abort(parent.reason);
  if (parent.aborted) controller.abort(parent.reason);
  else parent.addEventListener("abort", onAbort, { once: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (deadline !== undefined && !controller.signal.aborted) {
    const remaining = deadline - now();
    if (remaining <= 0) controller.abort(new DeadlineExceededError());
    else if (remaining <= MAX_TIMER_MS) {
      timer = setTimeout(() => controller.abort(new DeadlineExceededError()), remaining);
      timer.unref?.();
    }
  }
  return {
    signal: controller.signal,
    dispose: () => {
      if (timer) clearTimeout(timer);
      parent.removeEventListener("abort", onAbort);
    },
  };
}

/**
 * The error a run ends with once its signal aborted: `run aborted: deadline exceeded` for a
 * deadline, `run aborted: <reason>` when the worker gave a reason (e.g. shutting down).
 */
export function runAbortedError(signal: AbortSignal, cause?: unknown): SwitchboardError {
  const reason: unknown = signal.reason;
  const isDeadline =
    reason instanceof DeadlineExceededError || (reason instanceof Error && reason.name === "TimeoutError");
  let why = "";
  if (isDeadline) why = "deadline exceeded";
  else if (typeof reason === "string" && reason !== "") why = reason;
  else if (reason instanceof Error && reason.name !== "AbortError" && reason.message !== "")
    why = reason.message;
  return new SwitchboardError(
    isDeadline ? "TIMEOUT" : "UNAVAILABLE",
    why ? `run aborted: ${why}` : "run aborted",
    {
      cause: cause ?? reason,
    },
  );
}
