import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { type Config, EVENT_NAMES, methodsForRole, parseConfig, type Store } from "@switchboard/core";
import type { Cluster } from "@switchboard/store-pg";
import { createToolExecutor } from "@switchboard/tools";
import pino, { type Logger } from "pino";
import { Access } from "./access";
import { AgentFlows } from "./agent-flows";
import { AuditService } from "./audit-service";
import { ClusterEventBus } from "./cluster/cluster-event-bus";
import { ClusterCallAdmission } from "./cluster/cluster-limits";
import { ClusterRuns } from "./cluster/cluster-runs";
import { startLeaderTimers } from "./cluster/leader-timers";
import { openGatewayCluster } from "./cluster/open";
import { writeOperatorTokenCopy } from "./cluster/token-copy";
import type { Connection } from "./connection";
import { DataDirSecrets } from "./data-dir-secrets";
import { EventBus } from "./event-bus";
import { httpRoutes } from "./http/routes";
import { createDispatch, createHandlers } from "./methods";
import { OutputDelivery } from "./output-delivery";
import { PolicyService } from "./policy-service";
import { InProcessActiveRuns } from "./ports/active-runs";
import { MemoryCallBudget } from "./ports/call-budget";
import type { EventLog } from "./ports/event-log";
import { LocalCallAdmission } from "./ports/local-call-admission";
import { InProcessRecentMessages, UncachedRecentMessages } from "./ports/recent-messages";
import { RefusalAudit } from "./ports/refusal-audit";
import { InProcessReplayBudget } from "./ports/replay-budget";
import { InProcessRunLanes } from "./ports/run-lanes";
import { InProcessRunWaiters } from "./ports/run-waiters";
import type { Secrets } from "./ports/secrets";
import { InProcessSessionLocks } from "./ports/session-locks";
import { InProcessWaitGraph } from "./ports/wait-graph";
import { InProcessWorkerRegistry } from "./ports/worker-registry";
import { Retention } from "./retention";
import { runAssignment } from "./run-assignment";
import { RunScheduler } from "./run-scheduler";
import { SessionToolsBackend } from "./session-tools-backend";
import { SessionsService } from "./sessions-service";
import { StoreHealthMonitor } from "./store-health-monitor";
import { openConfiguredStore } from "./store-open";
import { createTelemetry, type Telemetry, type TelemetryOptions } from "./telemetry/telemetry";
import { ToolCalls } from "./tool-calls";
import { ToolCatalog } from "./tool-catalog";
import { startTransport, type Transport } from "./transport";
import { VERSION } from "./version";

export { keyPatternMatches } from "./access";

export interface GatewayOptions {
  config?: Config;
  /** Overrides `gateway.dataDir` (and `SWITCHBOARD_HOME`). */
  dataDir?: string;
  port?: number;
  host?: string;
  logger?: Logger;
  /** Use this store instead of opening the file store (tests); the gateway then does not close it. */
  store?: Store;
  /** `fsync` mode of the file store (tests may pass "none"; no effect on a postgres store). */
  fsync?: "always" | "none";
  handshakeTimeoutMs?: number;
  /** Where the operator token and audit key come from (default: files in the data dir). */
  secrets?: Secrets;
  /** Trace exporter and environment (tests: an in-memory exporter turns traces on). */
  telemetry?: TelemetryOptions;
  /**
   * How long a background flow (reply turns, announce) waits for a run before waiting again
   * (default 60 s; tests shorten it to reach a flow's second wait).
   */
  flowWaitSliceMs?: number;
}

/** What a graceful stop left undone ({@link Gateway.close}). */
export interface GatewayCloseResult {
  /**
   * Steps that failed, or did not finish by `gateway.shutdown.timeoutMs` and were abandoned (e.g.
   * the store's close on a database that stopped answering); empty when the stop finished.
   */
  undone: string[];
  /** Requests still being handled when `gateway.shutdown.drainMs` ran out: their sockets were closed. */
  requestsCut: number;
}

/** A step of a stop started past its deadline still gets this long (the store's close, say). */
const LATE_STEP_MS = 1_000;

/** The services of a running gateway, built once by {@link Gateway.start} in dependency order. */
interface GatewayParts {
  config: Config;
  dataDir: string;
  store: Store;
  ownsStore: boolean;
  log: Logger;
  operatorToken: string;
  instanceId: string;
  bus: EventLog;
  cluster: Cluster | undefined;
  stopLeaderTimers: (() => void) | undefined;
  clusterRuns: ClusterRuns | undefined;
  sessions: SessionsService;
  audit: AuditService;
  scheduler: RunScheduler;
  flows: AgentFlows;
  storeHealth: StoreHealthMonitor;
  retention: Retention;
  transport: Transport;
  telemetry: Telemetry;
}

/**
 * The running gateway: wiring only. Services are built in dependency order (each gets the small
 * ports it calls, never the gateway itself), then the transport is started with the dispatcher.
 * Every `InProcess*`, `Memory*` and `DataDir*` built in `start` is state only this process knows
 * (ports/): a second instance on the same store replaces exactly those.
 */
export class Gateway {
  readonly config: Config;
  readonly dataDir: string;
  readonly store: Store;
  readonly log: Logger;
  readonly operatorToken: string;
  readonly instanceId: string;
  readonly bus: EventLog;
  /** Set when the store is PostgreSQL: this instance is one of a cluster on that database. */
  readonly cluster: Cluster | undefined;
  readonly sessions: SessionsService;
  readonly audit: AuditService;
  readonly scheduler: RunScheduler;
  readonly flows: AgentFlows;
  readonly storeHealth: StoreHealthMonitor;
  readonly retention: Retention;
  /** Metrics and traces (each undefined when off). */
  readonly telemetry: Telemetry;
  private readonly transport: Transport;
  private readonly ownsStore: boolean;
  private readonly anchorTimer: NodeJS.Timeout;
  private closing: Promise<GatewayCloseResult> | undefined;
  private closeBegun: Promise<void> | undefined;
  private readonly stopLeaderTimers: (() => void) | undefined;
  private readonly clusterRuns: ClusterRuns | undefined;

  private constructor(parts: GatewayParts) {
    this.config = parts.config;
    this.dataDir = parts.dataDir;
    this.store = parts.store;
    this.ownsStore = parts.ownsStore;
    this.log = parts.log;
    this.operatorToken = parts.operatorToken;
    this.instanceId = parts.instanceId;
    this.bus = parts.bus;
    this.cluster = parts.cluster;
    this.stopLeaderTimers = parts.stopLeaderTimers;
    this.clusterRuns = parts.clusterRuns;
    this.sessions = parts.sessions;
    this.audit = parts.audit;
    this.scheduler = parts.scheduler;
    this.flows = parts.flows;
    this.storeHealth = parts.storeHealth;
    this.retention = parts.retention;
    this.transport = parts.transport;
    this.telemetry = parts.telemetry;
    // Bookkeeping every 5 s: the audit chain's anchored head (event seqs are reserved by the bus).
    this.anchorTimer = setInterval(() => {
      void parts.audit.anchor().catch(() => undefined);
    }, 5000);
    this.anchorTimer.unref();
    this.storeHealth.start();
    this.retention.start();
  }

  /** Open WebSocket connections (tests, health). */
  connectionCount(): number {
    return this.transport.connections.size;
  }

  get port(): number {
    return this.transport.port;
  }

  get url(): string {
    const host = this.config.gateway.host.includes(":")
      ? `[${this.config.gateway.host}]`
      : this.config.gateway.host;
    return `ws://${host}:${this.port}`;
  }

  static async start(options: GatewayOptions = {}): Promise<Gateway> {
    const config = options.config ?? parseConfig({});
    const log = options.logger ?? pino({ level: "silent" });
    const dataDir = resolve(options.dataDir ?? process.env.SWITCHBOARD_HOME ?? config.gateway.dataDir);
    const telemetry = await createTelemetry(config, options.telemetry);
    const opened =
      options.store ??
      (await openConfiguredStore(config, {
        dataDir,
        logger: log,
        ...(options.fsync ? { fsync: options.fsync } : {}),
      }));
    // Writes are timed at this boundary, so every store backend reports the same metrics.
    const store = telemetry.metrics ? telemetry.metrics.instrumentStore(opened) : opened;
    let cluster: Cluster | undefined;
    try {
      const instanceId = randomUUID();
      // A postgres store makes this instance one of a cluster on that database (several instances
      // act as one gateway); the file store keeps every port in process.
      let clusterRuns: ClusterRuns | undefined;
      let abandonHeldRuns: (() => void) | undefined;
      if (config.store.kind === "postgres" && !options.store) {
        cluster = await openGatewayCluster(config, {
          instanceId,
          logger: log,
          onLostRuns: async (runs) => {
            // Bound below; a sweep before the gateway is up finds the runs again on the next one.
            if (!clusterRuns) throw new Error("the gateway is still starting");
            await clusterRuns.lost(runs);
          },
          onLost: () => abandonHeldRuns?.(),
        });
      }
      const secrets = options.secrets ?? cluster?.secrets ?? new DataDirSecrets(dataDir);
      const token = await secrets.operatorToken();
      if (cluster && !options.secrets) {
        await writeOperatorTokenCopy(dataDir, token).catch((error: unknown) =>
          log.warn(
            { err: error, dataDir },
            "could not copy the operator token into the data dir; CLI commands here need --token",
          ),
        );
      }
      const eventsLog = log.child({ component: "events" });
      const bus: EventLog = cluster
        ? new ClusterEventBus(cluster.events, (error, event) =>
            eventsLog.error({ err: error, event }, "could not publish an event to the cluster's log"),
          )
        : await EventBus.open(store.meta, {
            window: { bytes: config.gateway.limits.maxReplayBytes },
            onError: (error, pending) =>
              eventsLog.error({ err: error, pending }, "could not reserve event seq numbers; events wait"),
          });
      // A log with records needs the key it was chained with: never a new one made in its place.
      const auditKey = await secrets.auditKey({ chained: (await store.audit.last()) !== undefined });
      const audit = cluster
        ? AuditService.forCluster(cluster.audit, store.audit, auditKey, bus)
        : await AuditService.open(store.audit, store.meta, auditKey, bus);
      const sessions = new SessionsService(
        store,
        config,
        bus,
        audit,
        log.child({ component: "sessions" }),
        new InProcessSessionLocks(),
        // Several instances append to the same sessions: a per-process cache would go stale.
        cluster ? new UncachedRecentMessages() : new InProcessRecentMessages(),
      );
      const policy = new PolicyService(config, sessions, audit, bus);
      const tools = new ToolCatalog(config, sessions);
      const scheduler = new RunScheduler(
        store,
        sessions,
        bus,
        log.child({ component: "runs" }),
        runAssignment(config, sessions, tools, bus, telemetry.runs),
        new InProcessRunWaiters(),
        new InProcessRunLanes(),
        new InProcessActiveRuns(),
        new InProcessWorkerRegistry(),
        config.gateway.limits,
        telemetry.runs,
      );
      if (cluster) {
        const runs = new ClusterRuns(cluster, store, bus, log.child({ component: "cluster-runs" }));
        clusterRuns = runs;
        abandonHeldRuns = () => {
          const count = scheduler.abandonHeld();
          if (count > 0)
            log.warn(
              { count },
              "let go of the runs this instance held: the cluster reassigned or ended them",
            );
        };
        scheduler.useCluster(runs);
        await runs.start(scheduler);
      }
      const output = new OutputDelivery(sessions, policy, audit, bus);
      const clusterLog = log.child({ component: "cluster" });
      // Budgets, wait cycles and maxChildren are decided on slots taken at admission: in memory on
      // one instance, through the cluster's tables on several (where the in-process budget and
      // graph only answer simulations).
      const budget = new MemoryCallBudget();
      const waitGraph = new InProcessWaitGraph();
      const admission = cluster
        ? new ClusterCallAdmission(cluster, clusterLog)
        : new LocalCallAdmission(budget, waitGraph, (requesterKey) => scheduler.activeSpawnsOf(requesterKey));
      const flows = new AgentFlows(
        config,
        store,
        sessions,
        policy,
        scheduler,
        output,
        audit,
        log.child({ component: "flows" }),
        budget,
        waitGraph,
        admission,
        cluster?.flows,
        options.flowWaitSliceMs,
      );
      const backend = new SessionToolsBackend(
        config,
        // Its listings read the index as served: rows with the clearance in force.
        { sessions: sessions.index, transcripts: store.transcripts },
        sessions,
        policy,
        scheduler,
        flows,
        output,
        (agentId) => scheduler.hasWorker(agentId),
        tools.gate,
      );
      const executor = createToolExecutor(backend, {
        logger: log,
      });
      const toolCalls = new ToolCalls(
        config,
        sessions,
        policy,
        audit,
        bus,
        tools.gate,
        backend,
        executor,
        telemetry.toolCalls,
      );
      const access = new Access(config, token, sessions, {
        active: (runId) => scheduler.get(runId)?.record,
        requireHeldBy: (runId, connection) => scheduler.requireHeldBy(runId, connection),
        stored: (runId) => store.runs.get(runId),
      });
      const methodDeps = {
        config,
        store,
        sessions,
        audit,
        policy,
        scheduler,
        backend,
        bus,
        access,
        tools,
        toolCalls,
        // Memory of this process: a cluster keeps one budget per instance too.
        replayBudget: new InProcessReplayBudget(config.gateway.limits.maxQueuedReplayBytes),
      };
      const handlers = createHandlers(methodDeps);
      const dispatch = createDispatch(
        handlers,
        new RefusalAudit((input) => audit.append(input)),
        log,
        telemetry.requests,
      );
      const storeHealth = new StoreHealthMonitor(store, log.child({ component: "store-health" }));
      const retention = new Retention(store, config, log.child({ component: "retention" }));
      scheduler.onRunEnded(() => retention.noteEnded());
      // A single process owns every unfinished run in the store, and so does the only live
      // instance of a cluster (what it finds was left by dead processes). Otherwise the other
      // instances' runs are theirs; a dead instance's are ended by the leader's sweep.
      const alone = !cluster || (await cluster.membership.alive()).every((id) => id === instanceId);
      if (alone) {
        await scheduler.recover();
        await flows.resumePendingAnnounces();
        await flows.resumeSendFollowUps();
      }
      let stopLeaderTimers: (() => void) | undefined;
      if (cluster && clusterRuns) {
        const runs = clusterRuns;
        stopLeaderTimers = startLeaderTimers(
          cluster,
          config,
          flows,
          runs,
          log.child({ component: "cluster" }),
        );
      } else {
        flows.startArchiver();
      }
      // Aborted by the stop's `stopWaiting`: MCP calls over HTTP waiting on a reply answer then.
      const stopWaiting = new AbortController();
      const transport = await startTransport({
        onStopWaiting: () => stopWaiting.abort(new Error("gateway shutting down")),
        host: options.host ?? config.gateway.host,
        port: options.port ?? config.gateway.port,
        limits: { ...config.gateway.limits, handshakeTimeoutMs: options.handshakeTimeoutMs ?? 5000 },
        handlers: {
          authenticate: (params, connection) => access.authenticate(params, connection),
          connectResult: (connection: Connection) => {
            const role = connection.identity!.role;
            return {
              protocol: 1,
              server: { name: "switchboard", version: VERSION, instanceId, epoch: bus.epoch ?? instanceId },
              connectionId: connection.id,
              seq: bus.currentSeq,
              role,
              methods: methodsForRole(role),
              events: [...EVENT_NAMES],
              limits: config.gateway.limits,
            };
          },
          handle: dispatch,
          onReady: (connection) => {
            const identity = connection.identity!;
            if (identity.role === "agent") {
              scheduler.addWorker(connection, identity.agents, access.workerConcurrency(connection));
              // Runs waiting in the cluster's queue for a worker of these agents.
              clusterRuns?.pull();
              clusterRuns?.workersChanged();
            }
          },
          onClose: (connection) => {
            if (connection.identity?.role !== "agent") return;
            void scheduler
              .removeWorker(connection)
              .catch((error) => log.error({ err: error }, "worker cleanup failed"))
              .finally(() => clusterRuns?.workersChanged());
          },
          health: () => ({
            ...(cluster ? storeHealth.report(cluster.health()) : storeHealth.report()),
            instanceId,
            version: VERSION,
          }),
          onOversizedReport: (connection, runId, bytes) => {
            const limit = config.gateway.limits.maxPayload;
            void scheduler
              .fail(
                runId,
                connection,
                `the worker's reply (a frame of ${bytes} bytes) exceeds limits.maxPayload (${limit})`,
              )
              // Not a run this worker holds (or already ended): the refusal answered the frame.
              .catch(() => undefined);
          },
        },
        routes: httpRoutes({
          ...methodDeps,
          log: log.child({ component: "http" }),
          instanceId,
          operatorToken: token,
          handlers,
          dispatch,
          metrics: telemetry.metrics,
          cancellationRelay: cluster?.cancellations,
          stopWaitingSignal: stopWaiting.signal,
        }),
        log: log.child({ component: "transport" }),
      });
      // Serving now: what the store left for later (the file store's index build) may start.
      store.startDeferredWork?.();
      const firstSeq = bus.currentSeq;
      telemetry.metrics?.setSources({
        connections: () => transport.connections,
        eventsPublished: () => bus.currentSeq - firstSeq,
        sessions: () => store.sessions.count(),
        retentionPruned: () => retention.totals,
      });
      return new Gateway({
        config,
        dataDir,
        store,
        ownsStore: !options.store,
        log,
        operatorToken: token,
        instanceId,
        bus,
        cluster,
        stopLeaderTimers,
        clusterRuns,
        sessions,
        audit,
        scheduler,
        flows,
        storeHealth,
        retention,
        transport,
        telemetry,
      });
    } catch (error) {
      await telemetry.shutdown();
      await cluster?.close().catch(() => undefined);
      if (!options.store) await store.close().catch(() => undefined);
      throw error;
    }
  }

  /**
   * The first step of a stop (also taken by `close`): no new connections, new requests refused
   * `UNAVAILABLE` (retryable; a worker's requests for the runs it holds still pass), and no run
   * handed to a worker any more — queued runs stay queued for the next start. Running runs go on:
   * a worker in this process (`switchboard up`) may finish them before `close` ends the rest.
   */
  beginClose(): Promise<void> {
    this.closeBegun ??= (async () => {
      clearInterval(this.anchorTimer);
      this.stopLeaderTimers?.();
      this.clusterRuns?.stop();
      this.storeHealth.stop();
      this.retention.stop();
      this.flows.stop();
      this.scheduler.stopDispatching();
      await this.transport.stopAccepting();
    })();
    return this.closeBegun;
  }

  /**
   * Graceful stop, in phases within `gateway.shutdown.timeoutMs`: `beginClose`; running runs end
   * `error` (`gateway shutting down`) and waits on the callers' behalf answer; requests being handled
   * get `gateway.shutdown.drainMs` to be answered; then the sockets close, and the audit anchor, the
   * cluster's membership, the event numbering's stop mark and the store's close follow. A step
   * still unfinished at the deadline is abandoned (a later one still gets a moment) and named in
   * the result, which the CLI turns into a non-zero exit.
   */
  close(): Promise<GatewayCloseResult> {
    this.closing ??= this.closeInPhases();
    return this.closing;
  }

  private async closeInPhases(): Promise<GatewayCloseResult> {
    const { drainMs, timeoutMs } = this.config.gateway.shutdown;
    const deadline = performance.now() + timeoutMs;
    const timeLeft = () => Math.max(LATE_STEP_MS, deadline - performance.now());
    const undone: string[] = [];
    const log = this.log.child({ component: "shutdown" });
    /** Runs `work` for at most the time left; a failure is logged, `quiet` ones at debug. */
    const step = async (name: string, work: () => unknown, quiet = false): Promise<void> => {
      let timer: NodeJS.Timeout | undefined;
      const running = Promise.resolve().then(work);
      const outcome = await Promise.race([
        running.then(
          () => "done" as const,
          (error: unknown) => {
            if (quiet) log.debug({ err: error, step: name }, "a shutdown step failed");
            else log.error({ err: error, step: name }, "a shutdown step failed");
            return quiet ? ("done" as const) : ("failed" as const);
          },
        ),
        new Promise<"late">((resolve) => {
          timer = setTimeout(() => resolve("late"), timeLeft());
        }),
      ]);
      clearTimeout(timer);
      if (outcome === "late") {
        log.error(
          { step: name, timeoutMs },
          "a shutdown step did not finish by gateway.shutdown.timeoutMs; going on without it",
        );
        undone.push(`${name} (timed out)`);
      } else if (outcome === "failed") undone.push(`${name} (failed)`);
    };

    await step("stop accepting", () => this.beginClose());
    // Running runs end `error` (`gateway shutting down`), which answers the waits on them.
    await step("end running runs", () => this.scheduler.stop());
    // Waits on runs that stay queued answer too: nothing will end those before the next start.
    this.transport.stopWaiting();
    const requestsCut = await this.transport.drain(Math.min(drainMs, timeLeft()));
    if (requestsCut > 0)
      log.warn(
        { requests: requestsCut, drainMs },
        "requests still being handled after gateway.shutdown.drainMs; closing their sockets",
      );
    this.transport.closeAll(1001, "gateway shutting down");
    this.bus.stop();
    await step("anchor the audit chain", () => this.audit.anchor(), true);
    // Leaves the membership and hands the leader lease over: no instance waits for a lease to expire.
    if (this.cluster) await step("leave the cluster", () => this.cluster?.close());
    if (this.bus.markStopped) await step("mark the event numbering's stop", () => this.bus.markStopped?.());
    if (this.ownsStore) await step("close the store", () => this.store.close());
    await step("shut telemetry down", () => this.telemetry.shutdown());
    if (undone.length > 0) log.error({ undone }, `the stop did not finish: ${undone.join("; ")}`);
    return { undone, requestsCut };
  }
}

export function startGateway(options: GatewayOptions = {}): Promise<Gateway> {
  return Gateway.start(options);
}
