import { afterEach } from "vitest";
import { behaviour } from "./behaviour";
import {
  startTestGateway,
  type TestGateway,
  TestWorker,
  WORKER_TOKEN,
  type WorkerHandler,
} from "./test-gateway";

/**
 * A gateway per test with its workers: after each test the background flows settle while the
 * workers can still answer, then the workers close and the gateway with its data goes.
 */
export function perTestGateway() {
  let current: TestGateway | undefined;
  const workers: TestWorker[] = [];
  afterEach(async () => {
    await current?.gateway.flows.idle();
    for (const worker of workers.splice(0)) worker.close();
    await current?.close();
    current = undefined;
  });
  return {
    workers,
    async start(...args: Parameters<typeof startTestGateway>): Promise<TestGateway> {
      current = await startTestGateway(...args);
      return current;
    },
    /** A worker (the shared worker token) serving `agents` on the current gateway. */
    async startWorker(
      handler: WorkerHandler = behaviour(),
      agents = ["main", "research"],
    ): Promise<TestWorker> {
      const worker = await TestWorker.start(current!.url, WORKER_TOKEN, agents, handler);
      workers.push(worker);
      return worker;
    },
  };
}
