import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { type ConfigInput, parseConfig } from "@switchboard/core";
import { afterAll, beforeAll, expect } from "vitest";
import { startTestGateway, type TestGateway, testStoreKind } from "../testing/test-gateway";

/** What a file's MCP tests share: set before its tests run. */
export interface McpTestGateway {
  gw: TestGateway;
  /** An operator client. */
  op: SwitchboardClient;
  /** MCP clients the tests opened: closed after them. */
  readonly clients: Client[];
}

/**
 * One gateway for a test file (the store `testStoreKind()` picks) with the reference agent as its
 * worker (`workerToken`, config's scripted rules), and chat sessions that each took one turn, so they
 * have a transcript to read. Closed after the file's tests, MCP clients first.
 */
export function useMcpGateway(
  config: ConfigInput,
  workerToken: string,
  chats: ReadonlyArray<readonly [key: string, channel: string]>,
): McpTestGateway {
  const shared = { clients: [] as Client[] } as McpTestGateway;
  let worker: RunningAgentWorker;
  beforeAll(async () => {
    shared.gw = await startTestGateway(config, { store: testStoreKind() });
    const op = await connect({
      url: shared.gw.url,
      token: shared.gw.token,
      role: "operator",
      reconnect: { enabled: false },
    });
    shared.op = op;
    worker = await startAgentWorker({
      url: shared.gw.url,
      token: workerToken,
      config: parseConfig(config),
      stopGraceMs: 2_000,
    });
    for (const [key, channel] of chats) {
      await op.sessions.create({ key, channel });
      const { runId } = await op.chat.send({ sessionKey: key, message: `hello ${channel} ${key}` });
      expect((await op.agent.wait({ runId, timeoutMs: 10_000 })).status).toBe("ok");
    }
  }, 30_000);
  afterAll(async () => {
    await Promise.all(shared.clients.splice(0).map((client) => client.close().catch(() => undefined)));
    await shared.gw.gateway.flows.idle();
    await worker.stop();
    await shared.op.close();
    await shared.gw.close();
  });
  return shared;
}
