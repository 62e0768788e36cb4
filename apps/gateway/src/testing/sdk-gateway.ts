import { type ClientOptions, connect, type SwitchboardClient } from "@switchboard/client";
import { afterEach } from "vitest";
import { startTestGateway, type TestGateway } from "./test-gateway";

/** Reconnects within milliseconds, so a test's drop is over before its next step. */
export const FAST_RECONNECT = { initialDelayMs: 5, maxDelayMs: 20, jitter: false } as const;

/**
 * One gateway per test with SDK clients on it; after each test the clients close, then the gateway
 * (call at a suite file's top level, as `perTestGateway`).
 */
export function perTestSdkGateway() {
  let current: TestGateway | undefined;
  const clients: SwitchboardClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
    await current?.close();
    current = undefined;
  });
  return {
    /** The current test's gateway (started with `start`). */
    get gw(): TestGateway {
      if (!current) throw new Error("no gateway started in this test");
      return current;
    },
    async start(...args: Parameters<typeof startTestGateway>): Promise<TestGateway> {
      current = await startTestGateway(...args);
      return current;
    },
    /** An operator client on the current gateway that reconnects fast; closed after the test. */
    async open(options: Partial<ClientOptions> = {}): Promise<SwitchboardClient> {
      const gateway = this.gw;
      const client = await connect({
        url: gateway.url,
        token: gateway.token,
        role: "operator",
        reconnect: FAST_RECONNECT,
        ...options,
      } as ClientOptions);
      clients.push(client);
      return client;
    },
  };
}
