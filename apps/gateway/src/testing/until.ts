import type { ConnectionState, SwitchboardClient } from "@switchboard/client";

/** Polls `check` every 10 ms until it returns something truthy (returned), or fails naming `what`. */
export async function until<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 5_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Resolves once the client is in `state` (at once if it is). */
export function untilState(client: SwitchboardClient, state: ConnectionState): Promise<void> {
  if (client.state === state) return Promise.resolve();
  return new Promise((resolve) => {
    const off = client.onStateChange((next) => {
      if (next !== state) return;
      off();
      resolve();
    });
  });
}
