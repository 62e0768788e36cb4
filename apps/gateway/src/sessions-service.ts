import { randomUUID } from "node:crypto";
import {
  archiveSession,
  type ChatType,
  type Config,
  canFlowTo,
  channelLevel,
  chatTypeFromKey,
  classifyKey,
  deleteSession,
  deriveChannel,
  escalateTaint,
  isSwitchboardError,
  isUuid,
  type KeyContext,
  type Level,
  LOWEST_LEVEL,
  mainKeyFor,
  minLevel,
  OUTSIDE_CHANNEL_KINDS,
  resetSessionTranscript,
  resolveClearance,
  resolveKeyInput,
  type SessionEntry,
  type SessionIndexStore,
  type SessionKind,
  type SessionListOptions,
  type SessionListQuery,
  type SessionListResult,
  type Store,
  SwitchboardError,
  type TranscriptEntry,
  type TranscriptEntryInput,
  type Versioned,
} from "@switchboard/core";
import type { Logger } from "pino";
import type { AuditService } from "./audit-service";
import type { EventLog } from "./ports/event-log";
import { type RecentMessagesCache, RUN_HISTORY_MAX_BYTES } from "./ports/recent-messages";
import type { SessionLocks } from "./ports/session-locks";

/**
 * What must hold for a session to be archived, asked under its lock: `settled` may read the store;
 * `now` is asked synchronously right before the archive write (this process's own runs of it).
 */
export interface ArchiveCheck {
  settled(): Promise<boolean>;
  now(): boolean;
}

export interface CreateSessionOptions {
  channel?: string;
  chatType?: ChatType;
  label?: string;
  displayName?: string;
  clearance?: Level;
  spawnedBy?: string;
  spawnDepth?: number;
  model?: string;
  deliveryContext?: { channel: string; to: string; accountId?: string };
}

interface KeyFacts {
  kind?: SessionKind;
  kindChatType?: ChatType | undefined;
  channel?: string;
  channelOf: {
    chatType?: ChatType | undefined;
    channel?: string | undefined;
    lastChannel?: string | undefined;
  };
}

/** Keys whose kind and channel are remembered; past it the memo starts over (it is only a cache). */
const KEY_FACTS_LIMIT = 50_000;

/** The sessions index, transcripts and label state, with every read-modify-write serialised per key. */
/** Compare-and-set rounds of one row write before its CONFLICT reaches the caller. */
const MAX_REWRITE_ATTEMPTS = 8;

/** A compare-and-set refused because the row changed since it was read (see `rewrite`). */
function isVersionConflict(error: unknown): boolean {
  return (
    error instanceof SwitchboardError &&
    error.code === "CONFLICT" &&
    typeof (error.details as { expectedVersion?: unknown } | undefined)?.expectedVersion === "number"
  );
}

export class SessionsService {
  private readonly keyFacts = new Map<string, KeyFacts>();
  /** Row touches not settled yet, per key (all of them issued so far). */
  private readonly touches = new Map<string, Promise<void>>();
  /**
   * The sessions index as the gateway serves it: the store's rows with the clearance in force
   * (`clearanceOf`) in place of the stored one. Every read of a row goes through it (this service's
   * own, and the listings of the methods and session tools), so no decision, status or list row
   * ever sees a clearance the current config no longer gives. Writes pass through unchanged.
   */
  readonly index: SessionIndexStore;
  /** Served rows whose clearance in force differs from the stored one: the stored one (`toStore`). */
  private readonly storedClearances = new WeakMap<SessionEntry, Level>();

  constructor(
    private readonly store: Store,
    private readonly config: Config,
    private readonly bus: EventLog,
    private readonly audit: AuditService,
    private readonly log: Logger,
    private readonly locks: SessionLocks,
    private readonly recent: RecentMessagesCache,
  ) {
    this.index = this.servedIndex(store.sessions);
  }

  get mainKey(): string {
    return this.config.session.mainKey;
  }

  defaultAgentId(): string {
    const list = this.config.agents.list;
    return (list.find((agent) => agent.default) ?? list[0])?.id ?? "main";
  }

  agentConfig(agentId: string) {
    return this.config.agents.list.find((agent) => agent.id === agentId);
  }

  agentClearance(agentId: string): Level {
    return this.agentConfig(agentId)?.clearance ?? this.config.agents.defaults.clearance;
  }

  /**
   * The clearance the current config gives this session: what `draft` gives a new session with
   * this row (min(agent clearance, channel classification) for outside-channel sessions, the
   * agent's clearance for the others).
   */
  configuredClearance(entry: SessionEntry): Level {
    const kind = this.kind(entry);
    return resolveClearance({
      kind,
      agentClearance: this.agentClearance(entry.agentId),
      // Only outside-channel sessions take the channel's level: the others skip the route lookup.
      channelLevel: OUTSIDE_CHANNEL_KINDS.includes(kind) ? this.inboundLevel(entry) : LOWEST_LEVEL,
    });
  }

  /**
   * The clearance in force for a session row. The stored clearance was computed from the config
   * the session was created under; the config may have changed since (an agent's clearance or a
   * channel's label lowered, then a restart). So:
   * - a sub-agent session (`spawnedBy`) holds min(stored, configured): its stored clearance carries
   *   its requester's clearance at the spawn, which the config cannot give again, and its agent's
   *   configured clearance caps it. An operator's pin on it holds within that cap too (rows written
   *   before the pin flag meant "operator" carry it for every spawn);
   * - a clearance an operator set explicitly (`clearancePinned`: `sessions.patch` or
   *   `sessions.create` with a clearance) holds as set, whatever the config says;
   * - any other session holds what the config gives now, in both directions: its clearance was
   *   derived from the config alone, so it is exactly what a session created now at its key gets.
   * Data the session already holds above a clearance lowered this way stays (its taint is not
   * touched): no read-up and no write-down refuse whatever would go past the new clearance, and
   * `sessions.reset` clears it. Computed per read (a few comparisons, no store access), so nothing
   * is migrated at start and every instance of a cluster applies its own (shared) config.
   */
  clearanceOf(entry: SessionEntry): Level {
    if (entry.spawnedBy !== undefined) return minLevel(entry.clearance, this.configuredClearance(entry));
    if (entry.clearancePinned) return entry.clearance;
    return this.configuredClearance(entry);
  }

  /** The row with the clearance in force (the same object when it is the stored one). */
  private served(entry: SessionEntry): SessionEntry {
    const clearance = this.clearanceOf(entry);
    if (clearance === entry.clearance) return entry;
    const served = { ...entry, clearance };
    this.storedClearances.set(served, entry.clearance);
    return served;
  }

  /**
   * The row to write for `next`, made from the served row `read`: the stored clearance back in place
   * unless the change set one. Written as served, the value in force under today's config would
   * become the stored one, and a sub-agent's spawn cap (or, were it pinned, an operator's choice)
   * would be lost for good once the config went back up.
   */
  private toStore(read: SessionEntry, next: SessionEntry): SessionEntry {
    const stored = this.storedClearances.get(read);
    return stored === undefined || next.clearance !== read.clearance ? next : { ...next, clearance: stored };
  }

  private servedIndex(raw: SessionIndexStore): SessionIndexStore {
    const served = (entry: SessionEntry | undefined) => (entry ? this.served(entry) : undefined);
    return {
      get: async (key) => served(await raw.get(key)),
      getVersioned: async (key) => {
        const read = await raw.getVersioned(key);
        return read ? { row: this.served(read.row), version: read.version } : undefined;
      },
      keysForSessionId: (sessionId) => raw.keysForSessionId(sessionId),
      put: (entry, options) => raw.put(entry, options),
      touch: (key, touch) => raw.touch(key, touch),
      delete: (key, options) => raw.delete(key, options),
      list: async (query: SessionListQuery, options?: SessionListOptions): Promise<SessionListResult> => {
        // A user rule on `target.clearance` decides on the clearance in force too.
        const residual = options?.residual;
        const result = await raw.list(
          query,
          residual ? { ...options, residual: (entry) => residual(this.served(entry)) } : options,
        );
        return { ...result, entries: result.entries.map((entry) => this.served(entry)) };
      },
      count: () => raw.count(),
    };
  }

  keyContext(callerAgentId?: string, field = "sessionKey"): KeyContext {
    return {
      ...(callerAgentId ? { callerAgentId } : {}),
      defaultAgentId: this.defaultAgentId(),
      mainKey: this.mainKey,
      // With `session.scope: "global"` every main-session reference is the one internal `global`
      // session (shown as `main`).
      scope: this.config.session.scope,
      field,
    };
  }

  /** Canonical key for any accepted input (aliases, bare keys, sessionIds). */
  resolveInput(input: string, callerAgentId?: string, field = "sessionKey"): Promise<string> {
    return resolveKeyInput(input, this.keyContext(callerAgentId, field), (id) =>
      this.store.sessions.keysForSessionId(id),
    );
  }

  mainSessionKey(agentId: string): string {
    return mainKeyFor(agentId, this.mainKey);
  }

  /** One stable function, so the store can cache kinds per classifier across list calls. */
  readonly classify = (entry: Pick<SessionEntry, "key" | "chatType">): SessionKind => this.kind(entry);

  kind(entry: Pick<SessionEntry, "key" | "chatType">): SessionKind {
    const facts = this.keyFactsOf(entry.key);
    if (facts.kind === undefined || facts.kindChatType !== entry.chatType) {
      facts.kind = classifyKey(entry.key, {
        mainKey: this.mainKey,
        ...(entry.chatType ? { chatType: entry.chatType } : {}),
      });
      facts.kindChatType = entry.chatType;
    }
    return facts.kind;
  }

  channel(entry: Pick<SessionEntry, "key" | "chatType" | "channel" | "lastChannel">): string {
    const facts = this.keyFactsOf(entry.key);
    if (
      facts.channel === undefined ||
      facts.channelOf.chatType !== entry.chatType ||
      facts.channelOf.channel !== entry.channel ||
      facts.channelOf.lastChannel !== entry.lastChannel
    ) {
      facts.channel = deriveChannel(
        entry.key,
        {
          ...(entry.channel ? { channel: entry.channel } : {}),
          ...(entry.lastChannel ? { lastChannel: entry.lastChannel } : {}),
          ...(entry.chatType ? { chatType: entry.chatType } : {}),
        },
        this.mainKey,
      );
      facts.channelOf = { chatType: entry.chatType, channel: entry.channel, lastChannel: entry.lastChannel };
    }
    return facts.channel;
  }

  /**
   * Kind and channel are pure functions of the key and a few row fields, asked for several times
   * per send (policy facts, routes, contexts): remembered per key with the fields they came from.
   */
  private keyFactsOf(key: string): KeyFacts {
    let facts = this.keyFacts.get(key);
    if (!facts) {
      if (this.keyFacts.size >= KEY_FACTS_LIMIT) this.keyFacts.clear();
      facts = { channelOf: {} };
      this.keyFacts.set(key, facts);
    }
    return facts;
  }

  /** Where a reply to this session goes out: its delivery context, last route, or the peer in its key. */
  route(entry: SessionEntry): { channel: string; to: string } | undefined {
    if (entry.deliveryContext)
      return { channel: entry.deliveryContext.channel, to: entry.deliveryContext.to };
    const channel = this.channel(entry);
    if (channel === "internal" || channel === "unknown") return undefined;
    if (entry.lastTo) return { channel, to: entry.lastTo };
    const rest = entry.key.split(":").slice(2);
    const marker = rest.findIndex(
      (part, i) => i > 0 && (part === "dm" || part === "group" || part === "channel"),
    );
    if (marker > 0 && rest[marker + 1]) return { channel, to: rest.slice(marker + 1).join(":") };
    return undefined;
  }

  /** Sessions of outside chats (groups, channels, direct chats: a chat type, explicit or in the key). */
  isChannelBound(entry: SessionEntry): boolean {
    return (entry.chatType ?? chatTypeFromKey(entry.key)) !== undefined;
  }

  /** Classification of data arriving on this session's own channel. */
  inboundLevel(entry: SessionEntry): Level {
    const route = this.route(entry);
    return channelLevel(this.config.labels, route?.channel ?? this.channel(entry), route?.to);
  }

  channelLevelFor(channel: string, to?: string): Level {
    return channelLevel(this.config.labels, channel, to);
  }

  get(key: string): Promise<SessionEntry | undefined> {
    return this.index.get(key);
  }

  async require(key: string): Promise<SessionEntry> {
    const entry = await this.index.get(key);
    if (!entry) throw new SwitchboardError("NOT_FOUND", `session not found: ${key}`, { details: { key } });
    return entry;
  }

  /**
   * Serialises a read-modify-write of the key's row (and transcript). It starts only once every
   * row touch issued before it is durable, so a write never races an older touch (which, landing
   * last on a networked store, could undo it).
   */
  withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(key, async () => {
      const touch = this.touches.get(key);
      if (touch) await touch;
      return fn();
    });
  }

  /** Creates the session if it does not exist; returns the (existing or new) entry. */
  async ensure(
    key: string,
    options: CreateSessionOptions = {},
  ): Promise<{ entry: SessionEntry; created: boolean }> {
    const existing = await this.index.get(key);
    if (existing) return { entry: existing, created: false };
    return this.withLock(key, async () => {
      const again = await this.index.get(key);
      if (again) return { entry: again, created: false };
      const draft = this.draft(key, options);
      const { agentId, createdAt: now } = draft;
      await this.store.transcripts.create({ sessionId: draft.sessionId, key, createdAt: now });
      // Insert only: another gateway instance on the same database may create this key at the same
      // moment (the key's lock is per process); the row that got in first is the session.
      try {
        await this.store.sessions.put(draft, { expectedVersion: 0 });
      } catch (error) {
        if (!(error instanceof SwitchboardError) || error.code !== "CONFLICT") throw error;
        const winner = await this.index.get(key);
        if (!winner) throw error;
        return { entry: winner, created: false };
      }
      this.bus.publish(
        "session.updated",
        { key, sessionId: draft.sessionId, reason: "created" },
        { sessionKey: key, agentId },
      );
      return { entry: draft, created: true };
    });
  }

  /**
   * The row `ensure` would create for `key` (not written): what a decision about a session that does
   * not exist yet is made on, so a refused input leaves no session behind.
   */
  draft(key: string, options: CreateSessionOptions = {}): SessionEntry {
    // `global` (scope global) belongs to the default agent; every other key names its agent.
    const agentId = key === "global" ? this.defaultAgentId() : (key.split(":")[1] ?? this.defaultAgentId());
    const now = Date.now();
    const draft: SessionEntry = {
      key,
      sessionId: randomUUID(),
      agentId,
      createdAt: now,
      updatedAt: now,
      taint: "PUBLIC",
      clearance: "PUBLIC",
      ...(options.channel ? { channel: options.channel.toLowerCase() } : {}),
      ...(options.chatType ? { chatType: options.chatType } : {}),
      ...(options.label ? { label: options.label } : {}),
      ...(options.displayName ? { displayName: options.displayName } : {}),
      ...(options.spawnedBy ? { spawnedBy: options.spawnedBy } : {}),
      ...(options.spawnDepth !== undefined ? { spawnDepth: options.spawnDepth } : {}),
      ...(options.model ? { model: options.model } : {}),
      ...(options.deliveryContext ? { deliveryContext: options.deliveryContext } : {}),
    };
    draft.clearance = resolveClearance({
      kind: this.kind(draft),
      agentClearance: this.agentClearance(agentId),
      channelLevel: this.inboundLevel(draft),
      ...(options.clearance ? { override: options.clearance } : {}),
    });
    // An operator's explicit clearance is pinned (it holds whatever the config says later); a
    // spawn's is its requester's cap, which `clearanceOf` keeps under the agent's configured one.
    if (options.clearance && !options.spawnedBy) draft.clearancePinned = true;
    return draft;
  }

  async update(
    key: string,
    change: (entry: SessionEntry) => SessionEntry | undefined,
    reason: string,
  ): Promise<SessionEntry> {
    return this.withLock(key, () =>
      this.rewrite(key, async ({ row: entry, version }) => {
        const next = change({ ...entry });
        if (!next) return entry;
        return this.served(await this.write(entry, next, reason, version));
      }),
    );
  }

  /**
   * A read-modify-write of the key's row as a compare-and-set: `step` gets the row with its
   * version and writes with that version expected. The key's lock orders this process's writes;
   * another gateway instance on the same database shares no lock, so a write of theirs between the
   * read and the write makes the store refuse ours (CONFLICT) and `step` runs again on the new row.
   * Before session 21 the last writer won with a stale row: a taint could go down, a reset be undone.
   */
  private async rewrite<T>(key: string, step: (read: Versioned<SessionEntry>) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const read = await this.index.getVersioned(key);
      if (!read) throw new SwitchboardError("NOT_FOUND", `session not found: ${key}`, { details: { key } });
      try {
        return await step(read);
      } catch (error) {
        if (!isVersionConflict(error) || attempt >= MAX_REWRITE_ATTEMPTS) throw error;
      }
    }
  }

  /**
   * Archives a finished session: its row is marked, then its transcript moves to the archive, both
   * under the key's lock so no append lands in between. In that order, like a reset or delete: a
   * crash in between leaves an archived row and a transcript no live row points at, which the store
   * archives at its next open; the other order left a live row pointing at a transcript that was
   * gone (its history and sends failing NOT_FOUND). False when the session is gone, was reset
   * (another `sessionId`), is archived already, or `idle` says it still has work coming.
   */
  async archive(key: string, sessionId: string, idle?: ArchiveCheck): Promise<boolean> {
    return this.withLock(key, async () => {
      const entry = await this.index.get(key);
      if (!entry || entry.archivedAt || entry.sessionId !== sessionId) return false;
      if (idle && !(await idle.settled())) return false;
      // Nothing awaited from here to the archived row's write (issued as `archiveSession` starts),
      // so nothing this process does can slip in between the check and the write. The store checks
      // again, as one step with the inserts of new runs: a run made on another instance meanwhile
      // keeps the session live, and one made after is refused (see `Store.archiveIdleSession`).
      if (idle && !idle.now()) return false;
      const { archived, archiveError } = await archiveSession(this.store, key, {
        sessionId,
        at: Date.now(),
      });
      if (!archived) return false;
      if (archiveError)
        this.log.warn(
          { err: archiveError, key },
          "archived a session whose transcript stays until the next start",
        );
      this.bus.publish(
        "session.updated",
        { key, sessionId: archived.sessionId, reason: "archived" },
        { sessionKey: key, agentId: archived.agentId },
      );
      return true;
    });
  }

  /** Writes a changed row read at `version` (caller holds the key's lock) and tells subscribers. */
  private async write(
    entry: SessionEntry,
    next: SessionEntry,
    reason: string,
    version: number,
  ): Promise<SessionEntry> {
    next.updatedAt = Math.max(Date.now(), entry.updatedAt);
    const row = this.toStore(entry, next);
    await this.store.sessions.put(row, { expectedVersion: version });
    this.bus.publish(
      "session.updated",
      { key: row.key, sessionId: row.sessionId, reason },
      { sessionKey: row.key, agentId: row.agentId },
    );
    return row;
  }

  /**
   * `raiseTaint` bounded by the clearance on the row it writes over, for data a step decided on a row
   * read earlier (an operator may have lowered the clearance since): the refusal's message when the
   * rise would pass the clearance, else undefined once the taint is raised.
   */
  async raiseTaintWithin(
    key: string,
    level: Level,
    reason: string,
    source: string,
  ): Promise<string | undefined> {
    try {
      await this.raiseTaint(key, level, reason, source, "clearance");
      return undefined;
    } catch (error) {
      if (isSwitchboardError(error) && error.code === "FORBIDDEN") return error.message;
      throw error;
    }
  }

  /**
   * Raises the session's taint to at least `level` (never lowers it), recording the rise in the
   * transcript, the audit log and as a `session.taint` event.
   */
  async raiseTaint(
    key: string,
    level: Level,
    reason: string,
    source: string,
    /**
     * `clearance`: a rise past the session's clearance is refused (FORBIDDEN), judged on the row the
     * rise writes over. The caller decided no read-up on a row it read before; a clearance lowered
     * since (by an operator, on this instance or another) must not let the data in.
     */
    bound?: "clearance",
  ): Promise<{ from: Level; to: Level } | undefined> {
    // Nothing lies below the lowest level: no row to read (in a cluster, each read is a query).
    if (level === LOWEST_LEVEL) return undefined;
    // Fast path without the lock: taint only rises (a reset replaces the row), so a row already at
    // or above `level` needs nothing.
    const current = await this.index.get(key);
    if (current && !escalateTaint(current.taint, level, { at: 0, reason, source }).event) return undefined;
    return this.withLock(key, () =>
      this.rewrite(key, async ({ row: entry, version }) => {
        const escalation = escalateTaint(entry.taint, level, { at: Date.now(), reason, source });
        if (!escalation.event) return undefined;
        const { from, to } = escalation.event;
        if (bound === "clearance" && !canFlowTo(to, entry.clearance))
          throw new SwitchboardError(
            "FORBIDDEN",
            `read-up blocked: ${reason} (${to}) cannot flow to ${key} (clearance ${entry.clearance})`,
            { details: { key, level: to, clearance: entry.clearance } },
          );
        // The transcript's taint entry, the row and the audit record are one unit in the store: all
        // of them or none, also across a crash.
        const row = this.toStore(entry, {
          ...entry,
          taint: to,
          updatedAt: Math.max(Date.now(), entry.updatedAt),
        });
        const taintEntry = { type: "taint" as const, label: to, taint: { from, to, reason, source } };
        await this.audit.commitTaintRise(
          { kind: "taint", sessionKey: key, data: { from, to, reason, source } },
          { row, entry: taintEntry, expectedVersion: version },
          this.store,
        );
        this.bus.publish(
          "session.taint",
          { key, from, to, reason },
          { sessionKey: key, agentId: entry.agentId },
        );
        return { from, to };
      }),
    );
  }

  /**
   * Appends to the session's transcript and marks the row's activity (`updatedAt`, and
   * `addTokens` to `totalTokens`): the store's `touch`, issued once the entries are durable and not
   * awaited by the caller. Every other write of the key waits for the key's touches (see
   * `withLock`), so a row read for a write already holds them, for any store. A touch itself may be
   * made durable a little later (the file store gathers them for up to 100 ms), so a crash can lose
   * the activity marks of that moment, never an entry; a failed touch is logged.
   */
  append(
    key: string,
    inputs: TranscriptEntryInput[],
    activity: { addTokens?: number } = {},
  ): Promise<TranscriptEntry[]> {
    // Not `withLock`: an append need not wait for the previous append's touch, which keeps
    // touches off the path of a run's next entry.
    return this.locks.run(key, async () => this.appendTo(await this.require(key), inputs, activity));
  }

  /**
   * `append` with the entries built from the session's row as it is under the key's lock (a run's
   * reply labelled with the session's taint at that moment, for the transcript it was started in):
   * one read of the row where a read before `append` and `append`'s own were two. Appends nothing
   * when the session is gone or `build` returns undefined.
   */
  appendFor(
    key: string,
    build: (entry: SessionEntry) => TranscriptEntryInput[] | undefined,
    activity: { addTokens?: number } = {},
  ): Promise<TranscriptEntry[]> {
    return this.locks.run(key, async () => {
      const entry = await this.index.get(key);
      const inputs = entry ? build(entry) : undefined;
      return entry && inputs ? this.appendTo(entry, inputs, activity) : [];
    });
  }

  private async appendTo(
    entry: SessionEntry,
    inputs: TranscriptEntryInput[],
    activity: { addTokens?: number },
  ): Promise<TranscriptEntry[]> {
    const written = await this.store.transcripts.append(entry.sessionId, inputs);
    this.recent.add(entry.sessionId, written);
    // Bookkeeping events do not count as activity: only messages (or tokens) touch the row.
    if (activity.addTokens || inputs.some((input) => input.type !== "event"))
      this.touch(entry, activity.addTokens);
    return written;
  }

  /** Issues the row's touch; `withLock` waits for every touch of the key issued before it. */
  private touch(entry: SessionEntry, addTokens: number | undefined): void {
    const key = entry.key;
    const previous = this.touches.get(key);
    const touch = this.store.sessions
      .touch(key, { sessionId: entry.sessionId, at: Date.now(), ...(addTokens ? { addTokens } : {}) })
      .then(
        () => undefined,
        (error: unknown) =>
          this.log.warn({ err: error, key }, "could not record the session's last activity"),
      );
    const touched = previous ? Promise.all([previous, touch]).then(() => undefined) : touch;
    this.touches.set(key, touched);
    void touched.then(() => {
      if (this.touches.get(key) === touched) this.touches.delete(key);
    });
  }

  /**
   * Whether one of the session's newest `lookback` transcript entries (any type) is `wanted`: how a
   * step taken up again after a crash finds that it wrote already (a post's `delivery.sent`, a
   * spawn's recorded findings), which it wrote just before the mark it did not reach.
   */
  async wroteRecently(
    entry: SessionEntry,
    wanted: (item: TranscriptEntry) => boolean,
    lookback = 50,
  ): Promise<boolean> {
    return (await this.store.transcripts.read(entry.sessionId, { limit: lookback })).entries.some(wanted);
  }

  /**
   * The last `limit` message entries of a session (oldest first) but those of run `exceptRunId`,
   * served from a small in-memory cache that every append through this service keeps current; a
   * miss reads the transcript tail.
   */
  async recentMessages(entry: SessionEntry, limit: number, exceptRunId?: string): Promise<TranscriptEntry[]> {
    const others = (entries: readonly TranscriptEntry[]) =>
      exceptRunId === undefined
        ? entries.slice(-limit)
        : entries.filter((item) => item.runId !== exceptRunId).slice(-limit);
    const cached = this.recent.get(entry.sessionId);
    if (cached) return others(cached);
    const fill = this.recent.fillFrom(entry.sessionId);
    let read: Awaited<ReturnType<Store["transcripts"]["read"]>>;
    try {
      read = await this.store.transcripts.read(entry.sessionId, {
        limit: this.recent.depth,
        maxBytes: RUN_HISTORY_MAX_BYTES,
        filter: (item) => item.type === "message",
      });
    } catch (error) {
      fill();
      throw error;
    }
    fill(read);
    // The byte budget went partly to the run's own input (written before the run was assigned):
    // read again without it, or a big message before it would be missing from the run's history.
    if (
      exceptRunId !== undefined &&
      read.truncated &&
      read.entries.some((item) => item.runId === exceptRunId)
    ) {
      const before = await this.store.transcripts.read(entry.sessionId, {
        limit: this.recent.depth,
        maxBytes: RUN_HISTORY_MAX_BYTES,
        filter: (item) => item.type === "message" && item.runId !== exceptRunId,
      });
      return before.entries.slice(-limit);
    }
    return others(read.entries);
  }

  /**
   * New sessionId, taint back to PUBLIC, settings kept, old transcript archived. Crash-atomic
   * (see core's `resetSessionTranscript`): a kill at any step leaves the key on the old or the new
   * transcript, never on a missing one.
   */
  async reset(key: string): Promise<SessionEntry> {
    return this.withLock(key, async () => {
      const { entry, next, archiveError } = await this.rewrite(key, async ({ row: entry, version }) => {
        const now = Date.now();
        const next: SessionEntry = this.toStore(entry, {
          ...entry,
          sessionId: randomUUID(),
          taint: "PUBLIC",
          updatedAt: now,
        });
        delete next.totalTokens;
        delete next.contextTokens;
        const reset = await resetSessionTranscript(this.store, entry.sessionId, next, now, version);
        return { entry, next: this.served(next), ...reset };
      });
      if (archiveError) {
        this.log.error(
          { err: archiveError, sessionId: entry.sessionId },
          "old transcript not archived; the next start archives it",
        );
      }
      this.bus.publish(
        "session.updated",
        { key, sessionId: next.sessionId, reason: "reset" },
        { sessionKey: key, agentId: next.agentId },
      );
      return next;
    });
  }

  async delete(key: string, mode: "archive" | "remove" = "archive"): Promise<void> {
    await this.withLock(key, async () => {
      // Crash-atomic like `reset`: the row goes first, so a kill can only leave an unreferenced transcript.
      const { entry, archiveError } = await this.rewrite(key, async ({ row: entry, version }) => ({
        entry,
        ...(await deleteSession(this.store, entry, mode, version)),
      }));
      if (archiveError) {
        this.log.error(
          { err: archiveError, sessionId: entry.sessionId },
          "old transcript not archived; the next start archives it",
        );
      }
      this.bus.publish(
        "session.updated",
        { key, sessionId: entry.sessionId, reason: "deleted" },
        { sessionKey: key, agentId: entry.agentId },
      );
    });
  }

  isUuid(value: string): boolean {
    return isUuid(value);
  }

  transcriptPath(entry: SessionEntry): string {
    return this.transcriptPathOf(entry.sessionId);
  }

  transcriptPathOf(sessionId: string): string {
    return this.store.transcripts.locate(sessionId);
  }

  get logger(): Logger {
    return this.log;
  }
}
