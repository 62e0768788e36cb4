import type { Connection } from "../connection";

/**
 * The `tools.invoke` calls each connection has in flight, by the `toolCallId` it gave them, so that
 * `tools.cancel` (and the connection closing) can stop them: a send waiting for its reply stops
 * waiting, like an MCP call cancelled over HTTP. Only this process sees its connections' calls.
 */
export class InflightToolCalls {
  private readonly byConnection = new WeakMap<Connection, Map<string, AbortController>>();

  /**
   * Registers a call; its `signal` aborts on `cancel` or when the connection closes. Undefined for
   * a call without a `toolCallId`, or one whose id is already in flight on this connection (the
   * first keeps it).
   */
  track(
    connection: Connection,
    toolCallId: string | undefined,
  ): { signal: AbortSignal; done(): void } | undefined {
    if (toolCallId === undefined) return undefined;
    let calls = this.byConnection.get(connection);
    if (!calls) {
      const created = new Map<string, AbortController>();
      calls = created;
      this.byConnection.set(connection, created);
      connection.onClosed(() => {
        for (const controller of created.values()) controller.abort(new Error("connection closed"));
        created.clear();
      });
    }
    if (calls.has(toolCallId)) return undefined;
    const controller = new AbortController();
    calls.set(toolCallId, controller);
    const owner = calls;
    return {
      signal: controller.signal,
      done: () => {
        if (owner.get(toolCallId) === controller) owner.delete(toolCallId);
      },
    };
  }

  /** Stops the connection's call with this id; false when it has none in flight. */
  cancel(connection: Connection, toolCallId: string): boolean {
    const controller = this.byConnection.get(connection)?.get(toolCallId);
    if (!controller) return false;
    controller.abort(new Error("cancelled by the client"));
    return true;
  }
}
