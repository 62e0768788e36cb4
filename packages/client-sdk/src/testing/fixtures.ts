import type { Role } from "@switchboard/core";
import { afterEach, beforeEach } from "vitest";
import { type ClientStartOptions, SwitchboardClient } from "../client";
import type { ClientOptions } from "../client-options";
import { FAKE_TOKENS, FakeGateway, type FakeGatewayOptions } from "./fake-gateway";

/** Short delays so reconnect tests take milliseconds; correctness never depends on them. */
export const FAST_RECONNECT = { initialDelayMs: 5, maxDelayMs: 20 } as const;

/**
 * A fresh fake gateway per test, and clients that are closed after it. Tests read
 * `fixture.gateway` inside the test body (it is replaced before each test).
 */
export function useFakeGateway(options: FakeGatewayOptions = {}) {
  let gateway: FakeGateway | undefined;
  const clients: SwitchboardClient[] = [];

  beforeEach(async () => {
    gateway = await FakeGateway.start(options);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
    await gateway?.close();
    gateway = undefined;
  });

  const fixture = {
    get gateway(): FakeGateway {
      if (!gateway) throw new Error("the fake gateway is only available inside a test");
      return gateway;
    },
    options(role: Role, extra: Partial<ClientOptions> = {}): ClientOptions {
      return {
        url: fixture.gateway.url,
        token: FAKE_TOKENS[role],
        role,
        ...(role === "agent" ? { agents: ["alpha"] } : {}),
        reconnect: FAST_RECONNECT,
        ...extra,
      };
    },
    track<T extends SwitchboardClient>(client: T): T {
      clients.push(client);
      return client;
    },
    /** A client that is not yet connected (listeners can be attached before the handshake). */
    client(
      role: Role,
      extra: Partial<ClientOptions> = {},
      start: ClientStartOptions = {},
    ): SwitchboardClient {
      return fixture.track(new SwitchboardClient(fixture.options(role, extra), start));
    },
    async connect(role: Role, extra: Partial<ClientOptions> = {}): Promise<SwitchboardClient> {
      const client = fixture.client(role, extra, { failFast: true });
      await client.ready();
      return client;
    },
  };
  return fixture;
}

/** A promise with its resolver outside, to hold a fake handler open until the test releases it. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

/** Resolves the next time the client enters `state` (or now, if it is in it). */
export function untilState(client: SwitchboardClient, state: SwitchboardClient["state"]): Promise<void> {
  if (client.state === state) return Promise.resolve();
  return new Promise((resolve) => {
    const stop = client.onStateChange((next) => {
      if (next !== state) return;
      stop();
      resolve();
    });
  });
}

/** Polls `check` until it holds, for state no event announces; the test's timeout bounds it. */
export async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 2));
}
