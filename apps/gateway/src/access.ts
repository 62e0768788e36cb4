import { timingSafeEqual } from "node:crypto";
import {
  type Config,
  type ConnectParams,
  canonicalizeKey,
  compileGlob,
  isUuid,
  matchesAnyGlob,
  normalizeAgentId,
  type RunRecord,
  type SessionEntry,
  SwitchboardError,
  type ToolCaller,
} from "@switchboard/core";
import type { Connection, ConnectionIdentity } from "./connection";
import type { SessionsService } from "./sessions-service";

/** Session-key patterns: `*` matches any run of characters, `?` is a literal (keys may hold one). */
const KEY_GLOB = { questionMark: "literal" } as const;

/** Glob over session keys where `*` matches any run of characters. */
export function keyPatternMatches(pattern: string, key: string): boolean {
  return compileGlob(pattern, KEY_GLOB)(key);
}

function sameSecret(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/** Who an MCP caller is: the token's name (for audit) and the session it acts as. */
export interface McpBinding {
  tokenName: string;
  sessionKey: string;
}

/** What access checks need to know about runs: the live holder, else the stored record. */
export interface RunLookup {
  active(runId: string): RunRecord | undefined;
  requireHeldBy(runId: string, connection: Connection): RunRecord;
  stored(runId: string): Promise<RunRecord | undefined>;
}

/**
 * Who a connection is and what it may touch: token lookup and role check at connect, session
 * patterns of clients, run ownership of workers, and the operator's audited `as`.
 */
export class Access {
  /** Runs each worker announced it executes at once (`connect` `concurrency`), until it is ready. */
  private readonly concurrency = new WeakMap<Connection, number>();

  constructor(
    private readonly config: Config,
    private readonly operatorToken: string,
    private readonly sessions: SessionsService,
    private readonly runs: RunLookup,
  ) {}

  private findToken(token: string) {
    if (sameSecret(token, this.operatorToken)) return { name: "operator", token, role: "operator" as const };
    return this.config.auth.tokens.find((candidate) => sameSecret(token, candidate.token));
  }

  authenticate(params: ConnectParams, connection: Connection): ConnectionIdentity {
    const token = this.findToken(params.auth.token);
    if (!token) throw new SwitchboardError("UNAUTHORIZED", "invalid token");
    if (token.role !== "operator" && token.role !== params.role) {
      throw new SwitchboardError(
        "UNAUTHORIZED",
        `token "${token.name}" is for role ${token.role}, not ${params.role}`,
      );
    }
    // A param the role does not use would be silently ignored: an operator that believes it is
    // scoped to one session, a client that believes it serves agents. Refused, naming it.
    if (params.agents !== undefined && params.role !== "agent")
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `agents: only a role agent connection serves agents, not ${params.role}`,
      );
    if (params.sessionKey !== undefined && (params.role === "operator" || params.role === "agent"))
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `sessionKey: a role ${params.role} connection is not bound to a session (client and mcp ones are)`,
      );
    const identity: ConnectionIdentity = {
      role: params.role,
      tokenName: token.name,
      agents: new Set(),
      sessionPatterns: [],
    };
    if (params.role === "agent") {
      const agents = (params.agents ?? []).map((id) => normalizeAgentId(id, "agents"));
      if (agents.length === 0)
        throw new SwitchboardError("INVALID_REQUEST", "agents: a worker must serve at least one agent id");
      const allowed = "agents" in token && token.agents ? token.agents : undefined;
      for (const agentId of agents) {
        if (allowed && !allowed.includes(agentId)) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            `token "${token.name}" may not serve agent "${agentId}"`,
          );
        }
      }
      identity.agents = new Set(agents);
      if (params.concurrency !== undefined) this.concurrency.set(connection, params.concurrency);
    } else if (params.concurrency !== undefined) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        "concurrency: only a role agent connection may announce one",
      );
    } else if (params.role === "mcp") {
      identity.boundSession = this.boundSession(token, params.sessionKey);
    } else if (params.role === "client") {
      const patterns =
        "sessions" in token && token.sessions ? token.sessions : token.role === "operator" ? ["*"] : [];
      if (params.sessionKey) {
        const canonical = canonicalizeKey(
          params.sessionKey,
          this.sessions.keyContext(undefined, "sessionKey"),
        );
        if (!matchesAnyGlob(patterns, canonical, KEY_GLOB)) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            `token "${token.name}" may not act for session ${canonical}`,
          );
        }
        identity.sessionPatterns = [canonical];
      } else {
        if (patterns.length === 0) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            "sessionKey: required for a client token without session patterns",
          );
        }
        identity.sessionPatterns = patterns;
      }
    }
    connection.log.info({ role: identity.role, tokenName: token.name }, "connected");
    return identity;
  }

  /**
   * The session an `mcp` token acts as. Only a token of role mcp has one (an operator token is
   * refused too: it names no session, and acting as one is what `as` is for, audited).
   */
  private boundSession(
    token: ReturnType<Access["findToken"]> & object,
    sessionKey: string | undefined,
  ): string {
    if (token.role !== "mcp" || !("session" in token) || !token.session) {
      throw new SwitchboardError(
        "UNAUTHORIZED",
        `token "${token.name}" is for role ${token.role}, not mcp (an mcp token names its session in auth.tokens)`,
      );
    }
    if (sessionKey !== undefined) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        "sessionKey: not accepted for role mcp (the token's configured session is the caller)",
      );
    }
    return token.session;
  }

  /**
   * The MCP endpoints' token check (`Authorization: Bearer`): the token's name and bound session.
   * UNAUTHORIZED for a missing or unknown token, FORBIDDEN for a token of another role.
   */
  mcpToken(token: string | undefined): McpBinding {
    const found = token ? this.findToken(token) : undefined;
    if (!found) throw new SwitchboardError("UNAUTHORIZED", token ? "invalid token" : "missing bearer token");
    if (found.role !== "mcp" || !("session" in found) || !found.session) {
      throw new SwitchboardError(
        "FORBIDDEN",
        `token "${found.name}" is for role ${found.role}; the MCP endpoint takes only role mcp tokens`,
      );
    }
    return { tokenName: found.name, sessionKey: found.session };
  }

  /**
   * The binding of an `mcp` connection on the WebSocket protocol. The caller is the token's session;
   * `runId`/`as` would name another caller, so they are refused rather than ignored.
   */
  mcpBinding(
    connection: Connection,
    params: { runId?: string | undefined; as?: string | undefined },
  ): McpBinding {
    const identity = connection.identity!;
    if (identity.role !== "mcp" || !identity.boundSession) {
      throw new SwitchboardError("FORBIDDEN", "this connection is not bound to a session (role mcp)");
    }
    for (const field of ["runId", "as"] as const) {
      if (params[field] !== undefined) {
        throw new SwitchboardError(
          "INVALID_REQUEST",
          `${field}: not accepted for role mcp (the caller is the token's session ${identity.boundSession})`,
        );
      }
    }
    return { tokenName: identity.tokenName, sessionKey: identity.boundSession };
  }

  /** The concurrency a worker announced at connect (undefined: no limit). */
  workerConcurrency(connection: Connection): number | undefined {
    return this.concurrency.get(connection);
  }

  clientMaySee(connection: Connection, sessionKey: string | undefined): boolean {
    const identity = connection.identity!;
    if (identity.role === "operator") return true;
    if (!sessionKey) return false;
    // Checked for every event a client may receive: the patterns are compiled once per identity.
    return matchesAnyGlob(identity.sessionPatterns, sessionKey, KEY_GLOB);
  }

  /**
   * `named`: what the caller gave, when it named the session by its sessionId. A session it may
   * not access is then one it does not know (NOT_FOUND, as for an unknown id): a refusal would
   * confirm the id and name the key.
   */
  requireClientSession(connection: Connection, key: string, named?: string): void {
    if (this.clientMaySee(connection, key)) return;
    if (named !== undefined && named !== key && isUuid(named))
      throw new SwitchboardError("NOT_FOUND", `session not found: ${named}`);
    throw new SwitchboardError("FORBIDDEN", `this connection may not access session ${key}`);
  }

  async requireRunAccess(connection: Connection, runId: string): Promise<void> {
    if (connection.identity!.role === "operator") return;
    const record = this.runs.active(runId) ?? (await this.runs.stored(runId));
    // A run of a session the caller may not see is one it does not know: naming its session would
    // confirm a leaked run id and tell where it ran.
    if (!record || !this.clientMaySee(connection, record.sessionKey))
      throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`);
  }

  /** The run a worker holds (a run another connection holds is refused). */
  heldRun(connection: Connection, runId: string): RunRecord {
    return this.runs.requireHeldBy(runId, connection);
  }

  /** Caller of a tool call: the run's session (agent) or an audited `as` (operator). */
  async toolCaller(
    connection: Connection,
    params: { runId?: string | undefined; as?: string | undefined },
  ): Promise<{ caller: ToolCaller; entry: SessionEntry }> {
    const role = connection.identity!.role;
    if (role === "agent") {
      if (!params.runId) throw new SwitchboardError("INVALID_REQUEST", "runId: required for agent workers");
      const record = this.runs.requireHeldBy(params.runId, connection);
      const entry = await this.sessions.require(record.sessionKey);
      requireSameTranscript(record, entry);
      return {
        caller: {
          sessionKey: entry.key,
          agentId: entry.agentId,
          runId: record.runId,
          runOrigin: record.origin,
        },
        entry,
      };
    }
    // `runId` and `as` below are the operator's; any other role reaching here would pick its caller.
    if (role !== "operator") {
      throw new SwitchboardError("FORBIDDEN", `role ${role} may not choose the session a tool call runs as`);
    }
    if (params.runId && !params.as) {
      const active = this.runs.active(params.runId);
      if (!active) throw new SwitchboardError("NOT_FOUND", `run not active: ${params.runId}`);
      const entry = await this.sessions.require(active.sessionKey);
      return {
        caller: {
          sessionKey: entry.key,
          agentId: entry.agentId,
          runId: params.runId,
          runOrigin: active.origin,
          operator: connection.identity!.tokenName,
        },
        entry,
      };
    }
    if (!params.as)
      throw new SwitchboardError(
        "INVALID_REQUEST",
        "as: required (the session to act as) when no runId is given",
      );
    const key = await this.sessions.resolveInput(params.as, undefined, "as");
    const entry = await this.sessions.require(key);
    return {
      caller: { sessionKey: entry.key, agentId: entry.agentId, operator: connection.identity!.tokenName },
      entry,
    };
  }
}

/**
 * A run acts for the transcript it was started in: after a reset (new sessionId, taint back to
 * PUBLIC) a run of the old one would be judged at the new, lower taint for what it read before.
 * On one instance the reset ends such runs; this also covers a run held by another instance.
 */
export function requireSameTranscript(
  record: Pick<RunRecord, "runId" | "sessionId">,
  entry: SessionEntry,
): void {
  if (record.sessionId !== entry.sessionId) {
    throw new SwitchboardError(
      "FORBIDDEN",
      `run ${record.runId} belongs to an earlier transcript of ${entry.key}: the session was reset`,
      { details: { runId: record.runId } },
    );
  }
}
