type RequestId = string | number;

function requestId(message: unknown): RequestId | undefined {
  if (typeof message !== "object" || message === null || !("method" in message)) return undefined;
  const { id } = message as { id?: unknown };
  return typeof id === "string" || typeof id === "number" ? id : undefined;
}

/**
 * The first request id a batch repeats (JSON-RPC compares ids by value: `1` and `"1"` differ), or
 * undefined. Such a batch is refused whole, before anything of it runs: the SDK's transport keeps
 * one answer slot per id, so the first answer to a repeated id counted for both requests and the
 * repeat, which had run too (a send delivered), was answered nowhere. Only a POST's own batch is
 * checked: `/mcp` is stateless, and clients sharing a token may pick the same ids in their POSTs.
 */
export function repeatedRequestId(body: unknown): RequestId | undefined {
  if (!Array.isArray(body)) return undefined;
  const seen = new Set<RequestId>();
  for (const message of body) {
    const id = requestId(message);
    if (id === undefined) continue;
    if (seen.has(id)) return id;
    seen.add(id);
  }
  return undefined;
}
