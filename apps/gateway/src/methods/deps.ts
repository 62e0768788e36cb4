import type { Config, Store } from "@switchboard/core";
import type { Access } from "../access";
import type { AuditService } from "../audit-service";
import type { PolicyService } from "../policy-service";
import type { EventLog } from "../ports/event-log";
import type { ReplayBudget } from "../ports/replay-budget";
import type { RunScheduler } from "../run-scheduler";
import type { SessionToolsBackend } from "../session-tools-backend";
import type { SessionsService } from "../sessions-service";
import type { ToolCalls } from "../tool-calls";
import type { ToolCatalog } from "../tool-catalog";

/** What the protocol handlers are built from; each namespace module picks the parts it uses. */
export interface MethodDeps {
  config: Config;
  /** Reads only: writes to sessions and transcripts go through `sessions` (its per-key lock). */
  store: Pick<Store, "sessions" | "transcripts" | "runs">;
  sessions: SessionsService;
  audit: AuditService;
  policy: PolicyService;
  scheduler: RunScheduler;
  backend: SessionToolsBackend;
  bus: EventLog;
  access: Access;
  tools: ToolCatalog;
  toolCalls: ToolCalls;
  /** Event replay bytes queued unsent (built in `gateway.ts`; made from the config when absent). */
  replayBudget?: ReplayBudget;
}
