/**
 * The `tools/call` requests in flight on this instance's `/mcp`, by token and JSON-RPC id, so a
 * `notifications/cancelled` can stop the call it names. The endpoint is stateless: the
 * notification arrives in a POST of its own, handled by a fresh SDK server that never saw the
 * request, so the SDK's own cancellation cannot reach it.
 *
 * Several clients may share a token and pick the same ids. An id that names more than one call of
 * the token is ambiguous and cancels none: a missed cancellation only lets a call run to its own
 * timeout, a wrong one would end another client's call.
 *
 * On several instances the notification may reach another instance than its call, and the rule
 * holds for the whole cluster: the `relay` counts the calls of the key on every instance and has the
 * one cancelled, here or where it runs (see docs/cluster.md).
 */
export class McpCancellations {
  private readonly inflight = new Map<string, Set<AbortController>>();

  /** The cluster's calls; `onRelayError` hears the relay failing. */
  constructor(
    private readonly relay?: McpCancellationRelay,
    private readonly onRelayError: (error: unknown) => void = () => undefined,
  ) {
    void relay
      ?.listen((key) => {
        this.cancelKey(key);
      })
      .catch(onRelayError);
  }

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
    const untrack = this.relay?.track(key);
    return {
      signal: controller.signal,
      done: () => {
        untrack?.();
        calls.delete(controller);
        if (calls.size === 0 && this.inflight.get(key) === calls) this.inflight.delete(key);
      },
    };
  }

  /**
   * Cancels the one call of the token with this id; false when there is none or more than one
   * (here, or in the cluster), or when it runs on another instance (which the relay told). Without a
   * relay the call is aborted before this returns.
   */
  async cancel(tokenName: string, requestId: string | number): Promise<boolean> {
    const key = McpCancellations.key(tokenName, requestId);
    if (!this.relay) return this.cancelKey(key);
    const outcome = await this.relay.cancel(key).catch((error: unknown) => {
      this.onRelayError(error);
      return "failed" as const;
    });
    return outcome === "here" && this.cancelKey(key);
  }

  private cancelKey(key: string): boolean {
    const calls = this.inflight.get(key);
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

/**
 * The calls of every instance of a cluster (`ClusterCancellations` of store-pg): `track` records one
 * of this instance's until the function it returns is called; `cancel` answers `here` when the key
 * names exactly one call in the cluster and it runs on this instance, and tells the instance holding
 * it when that is another (whose `listen` handler then hears the key). Never rejects.
 */
export interface McpCancellationRelay {
  track(key: string): () => void;
  cancel(key: string): Promise<"here" | "sent" | "none" | "ambiguous" | "dropped" | "failed">;
  listen(handler: (key: string) => void): Promise<unknown>;
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

/**
 * The batch without the requests it cancels itself: the SDK's transport waits for an answer to every
 * request of a POST, and a request cancelled before it ran gets none, so the response never ended.
 * A cancelled request needs no answer (MCP), and the cancellation then has nothing left to name.
 */
export function withoutSelfCancelled(body: unknown): unknown {
  if (!Array.isArray(body)) return body;
  const cancelled = new Set(cancelledRequestIds(body));
  if (cancelled.size === 0) return body;
  const requestIds = new Set<unknown>();
  for (const message of body) {
    const id = (message as { id?: unknown } | null)?.id;
    if (typeof message === "object" && message !== null && "method" in message && id !== undefined)
      requestIds.add(id);
  }
  return body.filter((message) => {
    if (typeof message !== "object" || message === null) return true;
    const { id, method, params } = message as {
      id?: unknown;
      method?: unknown;
      params?: { requestId?: unknown };
    };
    if (method === "notifications/cancelled") return !requestIds.has(params?.requestId);
    return id === undefined || !cancelled.has(id as string | number);
  });
}
