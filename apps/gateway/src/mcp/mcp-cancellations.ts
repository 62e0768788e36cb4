/**
 * The `tools/call` requests in flight on this instance's `/mcp`, by token and JSON-RPC id, so a
 * `notifications/cancelled` can stop the call it names. The endpoint is stateless: the
 * notification arrives in a POST of its own, handled by a fresh SDK server that never saw the
 * request, so the SDK's own cancellation cannot reach it.
 *
 * Several clients may share a token and pick the same ids. An id that names more than one call of
 * the token is ambiguous and cancels none: a missed cancellation only lets a call run to its own
 * timeout, a wrong one would end another client's call. A cancellation that reaches another
 * instance of a cluster than its call is not honoured either (see docs/cluster.md).
 */
export class McpCancellations {
  private readonly inflight = new Map<string, Set<AbortController>>();

  private static key(tokenName: string, requestId: string | number): string {
    return `${tokenName}\u0000${typeof requestId}\u0000${requestId}`;
  }

  /** Registers a call; `signal` aborts when it is cancelled, `done` unregisters it. */
  track(tokenName: string, requestId: string | number): { signal: AbortSignal; done: () => void } {
    const key = McpCancellations.key(tokenName, requestId);
    const controller = new AbortController();
    const calls = this.inflight.get(key) ?? new Set<AbortController>();
    this.inflight.set(key, calls);
    calls.add(controller);
    return {
      signal: controller.signal,
      done: () => {
        calls.delete(controller);
        if (calls.size === 0 && this.inflight.get(key) === calls) this.inflight.delete(key);
      },
    };
  }

  /** Cancels the one call of the token with this id; false when there is none or more than one. */
  cancel(tokenName: string, requestId: string | number): boolean {
    const calls = this.inflight.get(McpCancellations.key(tokenName, requestId));
    if (calls?.size !== 1) return false;
    for (const controller of calls) controller.abort();
    return true;
  }

  /** Calls in flight (tests, metrics). */
  get size(): number {
    let count = 0;
    for (const calls of this.inflight.values()) count += calls.size;
    return count;
  }
}

/** The `requestId`s of the `notifications/cancelled` messages in a JSON-RPC body (one message or a batch). */
export function cancelledRequestIds(body: unknown): (string | number)[] {
  const messages = Array.isArray(body) ? body : [body];
  const ids: (string | number)[] = [];
  for (const message of messages) {
    if (typeof message !== "object" || message === null) continue;
    const { method, params } = message as { method?: unknown; params?: { requestId?: unknown } };
    if (method !== "notifications/cancelled") continue;
    const id = params?.requestId;
    if (typeof id === "string" || typeof id === "number") ids.push(id);
  }
  return ids;
}
