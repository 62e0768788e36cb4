import type { MethodName, MethodParams, MethodResult } from "@switchboard/core";

export interface CallOptions {
  /** Client-side deadline for the response; defaults to the client's `requestTimeoutMs`. */
  timeoutMs?: number;
  /** Aborting rejects the call with the signal's reason and forgets it (the gateway may still act on it). */
  signal?: AbortSignal;
  /**
   * Re-send the call after a reconnect if the connection drops while it is in flight. Defaults to
   * true for read-only methods (including `agent.wait`), false for everything that changes state,
   * whose in-flight calls are rejected with a retryable `UNAVAILABLE` instead.
   */
  retryOnReconnect?: boolean;
}

/** Methods whose params are all optional can be called without any. */
export type CallArgs<M extends MethodName> =
  Record<never, never> extends MethodParams<M>
    ? [params?: MethodParams<M>, options?: CallOptions]
    : [params: MethodParams<M>, options?: CallOptions];

export type MethodFunction<M extends MethodName> = (...args: CallArgs<M>) => Promise<MethodResult<M>>;

/**
 * Where each protocol method lives on the client: `client.<namespace>.<name>(params)`.
 * `events.subscribe` is `client.subscribe()`, which also keeps the resume cursor.
 */
export const METHOD_SHORTCUTS = {
  "sessions.list": ["sessions", "list"],
  "sessions.resolve": ["sessions", "resolve"],
  "sessions.history": ["sessions", "history"],
  "sessions.status": ["sessions", "status"],
  "sessions.create": ["sessions", "create"],
  "sessions.patch": ["sessions", "patch"],
  "sessions.reset": ["sessions", "reset"],
  "sessions.delete": ["sessions", "delete"],
  "chat.send": ["chat", "send"],
  agent: ["agent", "run"],
  "agent.wait": ["agent", "wait"],
  "agents.list": ["agents", "list"],
  "tools.list": ["tools", "list"],
  "tools.invoke": ["tools", "invoke"],
  "tools.cancel": ["tools", "cancel"],
  "policy.simulate": ["policy", "simulate"],
  "audit.tail": ["audit", "tail"],
  "audit.verify": ["audit", "verify"],
  "run.progress": ["run", "progress"],
  "run.complete": ["run", "complete"],
  "run.fail": ["run", "fail"],
  "runs.list": ["run", "list"],
} as const satisfies Record<Exclude<MethodName, "events.subscribe">, readonly [string, string]>;

type Shortcuts = typeof METHOD_SHORTCUTS;
type ShortcutMethod = keyof Shortcuts;
export type NamespaceName = Shortcuts[ShortcutMethod][0];

/** The typed functions of one namespace, e.g. `MethodNamespace<"sessions">` has `list`, `history`, …. */
export type MethodNamespace<N extends NamespaceName> = {
  readonly [M in ShortcutMethod as Shortcuts[M][0] extends N ? Shortcuts[M][1] : never]: MethodFunction<M>;
};

/** Methods that change nothing on the gateway, so re-sending one after a dropped connection is safe. */
export const READ_ONLY_METHODS: ReadonlySet<MethodName> = new Set<MethodName>([
  "sessions.list",
  "sessions.resolve",
  "sessions.history",
  "sessions.status",
  "agent.wait",
  "agents.list",
  "tools.list",
  "policy.simulate",
  "audit.tail",
  "audit.verify",
  "runs.list",
]);

type AnyCall = (method: MethodName, params?: unknown, options?: CallOptions) => Promise<unknown>;

export function buildNamespaces(call: AnyCall): { [N in NamespaceName]: MethodNamespace<N> } {
  const namespaces: Record<string, Record<string, unknown>> = {};
  for (const [method, [namespace, name]] of Object.entries(METHOD_SHORTCUTS)) {
    namespaces[namespace] ??= {};
    namespaces[namespace][name] = (params?: unknown, options?: CallOptions) =>
      call(method as MethodName, params, options);
  }
  return namespaces as { [N in NamespaceName]: MethodNamespace<N> };
}
