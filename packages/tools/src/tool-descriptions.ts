import {
  HISTORY_LIMIT,
  HISTORY_MAX_BYTES,
  SEND_TIMEOUT_SECONDS,
  SESSION_KINDS,
  SESSIONS_LIST_LIMIT,
  SESSIONS_LIST_MESSAGE_LIMIT,
  SPAWN_LABEL_MAX_LENGTH,
  type ToolName,
} from "@switchboard/core";

/**
 * What each tool tells the model. Written for an LLM reading a tool list: what the tool does, when to
 * reach for it, and what each status means, so the model can act on a failure instead of retrying blindly.
 */
export const TOOL_DESCRIPTIONS: Record<ToolName, string> = {
  sessions_list: [
    "List the sessions (conversations) you are allowed to see, most recently active first.",
    "Use it to discover session keys before calling sessions_history, sessions_send or session_status.",
    `Filter with kinds (${SESSION_KINDS.join(", ")}) and activeMinutes; limit defaults to ${SESSIONS_LIST_LIMIT.default} (max ${SESSIONS_LIST_LIMIT.max}).`,
    `Set messageLimit (max ${SESSIONS_LIST_MESSAGE_LIMIT.max}) to include each session's last messages (tool results are left out).`,
    'Returns {status: "ok", count, sessions, hidden}; hidden counts sessions that exist but that you are not allowed to see.',
  ].join(" "),
  sessions_history: [
    "Read the transcript of a session, oldest message first.",
    "sessionKey accepts a session key, an alias such as main, or a sessionId.",
    `limit defaults to ${HISTORY_LIMIT.default} (max ${HISTORY_LIMIT.max}); tool results are left out unless includeTools is true.`,
    "To page further back, call again with before set to the nextBefore value you got.",
    `Output is capped at ${HISTORY_MAX_BYTES / 1024} KiB: when truncated is true, older messages were dropped; page back with before to read them.`,
    "Reading a more sensitive session raises your own sensitivity label to match it.",
    'Statuses: "ok"; "not_found" when no such session exists; "forbidden" when you may not read it.',
  ].join(" "),
  sessions_send: [
    "Send a message to another session and, by default, wait for its agent's reply.",
    `timeoutSeconds defaults to ${SEND_TIMEOUT_SECONDS.default} (max ${SEND_TIMEOUT_SECONDS.max}); 0 sends without waiting.`,
    'Statuses: "ok" with the reply; "accepted" when you did not wait (the message was delivered or queued);',
    '"timeout" when the wait ran out: the message was still delivered and the other agent keeps working,',
    "so read its answer later with sessions_history instead of sending again;",
    '"error" when the other run failed; "forbidden" when the send is not allowed (nothing was delivered).',
    "The delivery field tells you whether the message was delivered or queued, independently of the reply.",
  ].join(" "),
  sessions_spawn: [
    "Start a sub-agent in a new session to work on a task in the background. It never waits:",
    'it returns {status: "accepted", runId, childSessionKey} at once, and the sub-agent\'s result is announced',
    "back to this session when it finishes, so do not poll for it.",
    "Write task as a complete, self-contained instruction: the sub-agent sees nothing else of this conversation.",
    `Optional: label (max ${SPAWN_LABEL_MAX_LENGTH} characters), agentId (default: your own agent), model,`,
    'runTimeoutSeconds (default 0: the run timeout of that agent), cleanup ("keep" by default, "delete" removes the session after it reports).',
    'Statuses: "accepted" (if modelApplied is false, the model override was ignored; see warning);',
    '"forbidden" when spawning is not allowed here (too deep, agent not allowed, too many children), with the reason.',
  ].join(" "),
  session_status: [
    "Show the state of a session: its kind, channel, agent, model, token usage, sensitivity labels,",
    "whether a run is active, and the sub-agents it spawned.",
    "Without sessionKey it describes your own session.",
    'Statuses: "ok"; "not_found" when no such session exists; "forbidden" when you may not see it.',
  ].join(" "),
  agents_list: [
    "List the agents known to the gateway: your own agent first, then the agents you may spawn sub-agents as.",
    "Each entry says whether the agent is configured, has a worker connected, and is allowed for sessions_spawn.",
    "Use it to choose an agentId for sessions_spawn.",
  ].join(" "),
  message: [
    "Deliver a text message out to a recipient on a channel (for example a Telegram chat).",
    "channel, to and text are all required. Sensitivity labels, the send policy and redaction rules apply;",
    'the result is {status: "ok", deliveryId} (redactions counts redacted parts, if any),',
    'or "forbidden" when the delivery is not allowed (nothing was sent).',
  ].join(" "),
  simulate_tool_call: [
    "Check what the policy would decide for a tool call without making it: no side effects,",
    "nothing is delivered and your labels do not change.",
    "Pass tool_name and the args you would use (an object).",
    'Returns {status: "ok", decision: "ALLOW" | "BLOCK" | "REDACT", ruleId, message, evaluated, taint: {current, after}},',
    "where taint.after is the sensitivity your session would have after the real call.",
    "Use it before an action you suspect may be blocked.",
  ].join(" "),
  summarize: [
    "Produce a concise recap of a session's conversation.",
    'scope is "session" (default: the whole session) or "topic" (the current topic only).',
    "Without sessionKey it summarises your own session; another session follows the same rules as sessions_history.",
    'Returns {status: "ok", summary}; "not_found" or "forbidden" as for sessions_history.',
  ].join(" "),
};
