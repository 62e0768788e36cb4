import {
  type AgentConnectionOptions,
  type AssignedRun,
  type Logger as ClientLogger,
  type RunContext as ClientRunContext,
  type RunReply,
  SwitchboardClient,
  serve,
} from "@switchboard/client";
import {
  type AgentModelConfigInput,
  type Config,
  defaultAgentId,
  defaultAgentModel,
  normalizeAgentId,
  SwitchboardError,
} from "@switchboard/core";
import type { Logger } from "pino";
import { type CreateModelProviderOptions, createModelProvider } from "./model/create-model-provider";
import type { ModelProvider } from "./model/model-types";
import { executeRun, type RunContext } from "./run/execute-run";
import { DeadlineExceededError } from "./run/run-abort";

/** `tools.invoke` refuses longer ids; the gateway then picks one itself. */
const MAX_TOOL_CALL_ID = 128;

export interface AgentWorkerOptions {
  /** The gateway's WebSocket URL, e.g. `ws://127.0.0.1:18789`. */
  /** The gateway, or several instances of one cluster (tried in turn; see the SDK's `url`). */
  url: string | string[];
  /** A token for role `agent` (or an operator token) that may serve the agents. */
  token: string;
  /** The parsed gateway config (core `Config`): agents.list[].model gives each agent's provider. */
  config: Config;
  /** Agent ids to serve (default: every configured agent). */
  agents?: string[];
  /** Directory that relative rule-file paths in the config are resolved against. */
  baseDir?: string;
  logger?: Logger;
  /** Runs executed at once; further assigned runs wait in arrival order (default 4). */
  concurrency?: number;
  /** How long `stop()` lets current runs finish before aborting them (default 10 s). */
  stopGraceMs?: number;
  /**
   * Keep retrying until the gateway is reachable instead of failing when the first connection
   * attempt fails (default false: a wrong URL is reported at once).
   */
  waitForGateway?: boolean;
  /** Model turns that may ask for tools before a run is stopped (default 8). */
  maxToolRounds?: number;
  /** Passed to every OpenAI-compatible provider (retries, environment for `apiKeyEnv`, fetch). */
  providerOptions?: Pick<CreateModelProviderOptions, "maxRetries" | "maxRetryDelayMs" | "env" | "fetch">;
  /** Passed to the SDK client (e.g. `clientName`, `reconnect`, `WebSocket`). */
  clientOptions?: Omit<AgentConnectionOptions, "url" | "token" | "logger">;
}

export interface RunningAgentWorker {
  /** The agent ids this worker serves. */
  readonly agents: string[];
  /** The role-`agent` connection (for its state and `onStateChange`). */
  readonly client: SwitchboardClient;
  /** Runs executing right now. */
  readonly activeRuns: number;
  /** Resolves once the worker is closed for good: after `stop()`, or when the connection gave up. */
  readonly closed: Promise<void>;
  /** Stops taking runs, lets current ones finish within the grace period, fails the rest, then closes. */
  stop(): Promise<void>;
}

/**
 * The reference agent worker: connects to the gateway as role `agent` for the given agent ids and
 * runs every assigned run through that agent's model (`executeRun`), calling tools through the
 * gateway. Each agent's provider is built before connecting, so a bad model config fails here.
 */
export async function startAgentWorker(options: AgentWorkerOptions): Promise<RunningAgentWorker> {
  const logger = options.logger?.child({ component: "agent-worker" });
  const agents = servedAgents(options.config, options.agents);
  const providers = new Map<string, ModelProvider>();
  for (const agentId of agents) {
    providers.set(agentId, await providerFor(options, agentId, logger));
  }

  // Models a run names (`run.assigned.model`, e.g. a sub-agent's `subagents.model`), built once each.
  const runModels = new Map<string, Promise<ModelProvider>>();
  const modelFor = (run: AssignedRun, own: ModelProvider): Promise<ModelProvider> => {
    const wanted = (run as { model?: unknown }).model;
    if (wanted === undefined) return Promise.resolve(own);
    const index = options.config.agents.list.findIndex((agent) => agent.id === run.agentId);
    const base = options.config.agents.list[index]?.model ?? defaultAgentModel();
    let config: AgentModelConfigInput;
    if (typeof wanted === "string") {
      // A name picks a model on the agent's own provider; the scripted provider has no models to pick.
      if (base.provider !== "openai" || base.model === wanted) return Promise.resolve(own);
      config = { ...base, model: wanted };
    } else config = wanted as AgentModelConfigInput;
    const key = JSON.stringify(config);
    let built = runModels.get(key);
    if (!built) {
      if (runModels.size >= 32) runModels.delete(runModels.keys().next().value as string);
      built = createModelProvider(config, {
        ...options.providerOptions,
        ...(options.baseDir !== undefined ? { baseDir: options.baseDir } : {}),
        where: `run.assigned.model of run ${run.runId}`,
        ...(logger ? { logger } : {}),
      });
      // A model that cannot be built is not kept: the next run naming it tries again.
      built.catch(() => runModels.delete(key));
      runModels.set(key, built);
    }
    return built;
  };

  const handler = async (run: AssignedRun, sdk: ClientRunContext): Promise<RunReply> => {
    const own = providers.get(run.agentId);
    if (!own) throw new SwitchboardError("NOT_FOUND", `this worker has no model for agent ${run.agentId}`);
    const model = await modelFor(run, own);
    const { signal, dispose } = runSignal(sdk.signal);
    const context: RunContext = {
      signal,
      invokeTool: (name, args, call) =>
        sdk.invokeTool(
          name,
          args,
          call && call.toolCallId.length <= MAX_TOOL_CALL_ID ? { toolCallId: call.toolCallId } : {},
        ),
      // Calls made through tools.invoke are recorded (and audited) by the gateway itself; reporting
      // them again as tool-call/tool-result progress would put every call twice in the transcript.
      progress: (kind, data) => (kind === "text-delta" ? sdk.progress(kind, data) : undefined),
    };
    logger?.debug({ runId: run.runId, agentId: run.agentId, model: model.name }, "run started");
    try {
      const result = await executeRun(run, model, context, {
        ...(logger ? { logger } : {}),
        ...(options.maxToolRounds !== undefined ? { maxToolRounds: options.maxToolRounds } : {}),
      });
      logger?.info({ runId: run.runId, agentId: run.agentId, usage: result.usage }, "run completed");
      return result;
    } catch (error) {
      logger?.warn({ runId: run.runId, agentId: run.agentId, error: String(error) }, "run failed");
      throw error;
    } finally {
      dispose();
    }
  };

  const connection: AgentConnectionOptions = {
    ...options.clientOptions,
    url: options.url,
    token: options.token,
    clientName: options.clientOptions?.clientName ?? "switchboard-agent",
    ...(logger ? { logger: logger as ClientLogger } : {}),
  };
  const workerOptions = {
    ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
    ...(options.stopGraceMs !== undefined ? { stopGraceMs: options.stopGraceMs } : {}),
    ...(logger ? { logger: logger as ClientLogger } : {}),
  };
  // `serve` with options fails fast on the first attempt; given a client it waits for it to connect.
  const worker = options.waitForGateway
    ? await serve(
        new SwitchboardClient({ ...connection, role: "agent", agents }),
        agents,
        handler,
        workerOptions,
      )
    : await serve(connection, agents, handler, workerOptions);
  logger?.info(
    { agents, models: Object.fromEntries([...providers].map(([id, p]) => [id, p.name])) },
    "serving agents",
  );

  const closed = new Promise<void>((resolve) => {
    if (worker.client.state === "closed") resolve();
    else
      worker.client.onStateChange((state) => {
        if (state === "closed") resolve();
      });
  });
  return {
    agents,
    client: worker.client,
    get activeRuns() {
      return worker.activeRuns;
    },
    closed,
    async stop() {
      await worker.stop();
      await closed;
    },
  };
}

/**
 * The agent ids to serve, normalised: the requested ones (each must be configured), else every
 * configured agent. A config with an empty agent list still has the default agent `main`.
 */
export function servedAgents(config: Config, requested?: readonly string[]): string[] {
  const configured = config.agents.list.map((agent) => agent.id);
  const known = configured.length > 0 ? configured : [defaultAgentId(config)];
  if (requested === undefined) return known;
  if (requested.length === 0)
    throw new SwitchboardError("INVALID_REQUEST", "agents: name at least one agent id");
  const ids = [...new Set(requested.map((id) => normalizeAgentId(id, "agents")))];
  const unknown = ids.filter((id) => !known.includes(id));
  if (unknown.length > 0) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `agents: ${unknown.map((id) => `"${id}"`).join(", ")} ${unknown.length === 1 ? "is" : "are"} not configured (configured: ${known.join(", ")})`,
      { details: { unknown, configured: known } },
    );
  }
  return ids;
}

async function providerFor(options: AgentWorkerOptions, agentId: string, logger: Logger | undefined) {
  const index = options.config.agents.list.findIndex((agent) => agent.id === agentId);
  const entry = index >= 0 ? options.config.agents.list[index] : undefined;
  return createModelProvider(entry?.model ?? defaultAgentModel(), {
    ...options.providerOptions,
    ...(options.baseDir !== undefined ? { baseDir: options.baseDir } : {}),
    where: index >= 0 ? `agents.list[${index}].model` : `model of agent ${agentId}`,
    ...(logger ? { logger } : {}),
  });
}

/**
 * Follows the SDK's run signal, but reports the SDK's deadline abort as the run loop's own
 * deadline reason, so a late run always fails with `run aborted: deadline exceeded`.
 */
function runSignal(parent: AbortSignal): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const follow = () => {
    const reason: unknown = parent.reason;
    const isDeadline = reason instanceof SwitchboardError && reason.code === "TIMEOUT";
    controller.abort(isDeadline ? new DeadlineExceededError() : reason);
  };
  if (parent.aborted) follow();
  else parent.addEventListener("abort", follow, { once: true });
  return { signal: controller.signal, dispose: () => parent.removeEventListener("abort", follow) };
}
