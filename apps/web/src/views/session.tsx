import type { SessionStatusResult } from "@switchboard/core";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { api, role } from "../lib/connection";
import {
  type HistoryMessage,
  LEVELS,
  mergeMessages,
  prettyJson,
  provenanceText,
  type ToolCallItem,
  toolStatus,
  transcriptItems,
} from "../lib/format";
import { useLoad, useNow, useThrottled } from "../lib/hooks";
import { current, href, navigate, runHref } from "../lib/router";
import { Ago, ErrorText, errorMessage, Level, Panel, SessionLink } from "./parts";

const PAGE_MESSAGES = 50;

interface Transcript {
  messages: HistoryMessage[];
  /** Cursor for the next older page; undefined once the first entry is loaded. */
  nextBefore: number | undefined;
  loaded: boolean;
}

export function SessionView({ sessionKey }: { sessionKey: string }) {
  const status = useLoad(() => api().sessions.status({ sessionKey }), [sessionKey]);
  const canonicalKey = useRef<string | undefined>(undefined);
  canonicalKey.current = status.data?.sessionKey;
  const refreshStatus = useThrottled(status.reload, 500);
  const [transcript, setTranscript] = useState<Transcript>({
    messages: [],
    nextBefore: undefined,
    loaded: false,
  });
  const [historyError, setHistoryError] = useState<string | undefined>(undefined);
  /** Text streamed by runs still going, by run id. */
  const [streaming, setStreaming] = useState<Record<string, string>>({});
  const [olderLoading, setOlderLoading] = useState(false);
  const showTools = current.value.query.get("tools") !== "hide";
  const logRef = useRef<HTMLDivElement>(null);
  const stickToBottom = useRef(true);
  const keepFromBottom = useRef<number | undefined>(undefined);

  async function loadLatest(): Promise<void> {
    try {
      const page = await api().sessions.history({ sessionKey, includeTools: true, limit: PAGE_MESSAGES });
      setHistoryError(undefined);
      setTranscript((t) => {
        const incoming = page.messages as HistoryMessage[];
        const newest = t.messages.at(-1)?.seq;
        // More came in since the last load than one page holds (a reconnect after a while offline, a
        // burst between two refreshes): the page does not reach what is shown, and merging would leave
        // a hole no paging fills. Start over from this page; older entries, the ones shown before
        // included, load on scroll.
        if (t.loaded && newest !== undefined && page.nextBefore !== undefined && page.nextBefore > newest + 1)
          return { messages: incoming, nextBefore: page.nextBefore, loaded: true };
        return {
          messages: mergeMessages(t.messages, incoming),
          nextBefore: t.loaded ? t.nextBefore : page.nextBefore,
          loaded: true,
        };
      });
    } catch (error) {
      if (isNotFound(error)) setTranscript({ messages: [], nextBefore: undefined, loaded: true });
      else setHistoryError(errorMessage(error));
    }
  }
  const refreshTranscript = useThrottled(() => void loadLatest(), 200);

  async function loadOlder(): Promise<void> {
    if (olderLoading || transcript.nextBefore === undefined) return;
    setOlderLoading(true);
    const box = logRef.current;
    keepFromBottom.current = box ? box.scrollHeight - box.scrollTop : undefined;
    try {
      const page = await api().sessions.history({
        sessionKey,
        includeTools: true,
        limit: PAGE_MESSAGES,
        before: transcript.nextBefore,
      });
      setTranscript((t) => ({
        messages: mergeMessages(t.messages, page.messages as HistoryMessage[]),
        nextBefore: page.nextBefore,
        loaded: true,
      }));
    } catch (error) {
      setHistoryError(errorMessage(error));
    } finally {
      setOlderLoading(false);
    }
  }

  useEffect(() => {
    void loadLatest();
    const client = api();
    // Events name the canonical key; the URL may hold an alias ("main") until the status names it.
    const mine = (key: string | undefined) => key === sessionKey || key === canonicalKey.current;
    const offs = [
      client.on("run.progress", (event) => {
        const p = event.payload;
        if (!mine(p.sessionKey)) return;
        if (p.kind === "text-delta" && p.text) {
          setStreaming((s) => ({ ...s, [p.runId]: (s[p.runId] ?? "") + p.text }));
        } else refreshTranscript();
      }),
      client.on("run.started", (event) => {
        if (mine(event.payload.sessionKey)) {
          refreshTranscript();
          refreshStatus();
        }
      }),
      client.on("run.ended", (event) => {
        if (!mine(event.payload.sessionKey)) return;
        void loadLatest().then(() =>
          setStreaming((s) => {
            const { [event.payload.runId]: _done, ...rest } = s;
            return rest;
          }),
        );
        refreshStatus();
      }),
      client.on("session.updated", (event) => {
        if (!mine(event.payload.key)) return;
        refreshTranscript();
        refreshStatus();
      }),
      client.on("session.taint", (event) => {
        if (mine(event.payload.key)) refreshStatus();
      }),
      // Events lost across a reconnect (the replay window moved past them): the run.ended that would
      // have closed a "writing…" entry and reloaded the transcript may be among them. Read it all again.
      client.onEventsMissed(() => {
        setStreaming({});
        void loadLatest();
        status.reload();
      }),
    ];
    // An operator already receives every event (the app's subscription); a client subscribes here.
    if (role.value === "client") void client.subscribe({ sessionKey }).catch(() => undefined);
    return () => {
      for (const off of offs) off();
    };
  }, [sessionKey]);

  // Oldest at the top: keep the view on the newest entry unless the reader scrolled up, and keep the
  // reader's place when an older page is added above.
  useLayoutEffect(() => {
    const box = logRef.current;
    if (!box) return;
    if (keepFromBottom.current !== undefined) {
      box.scrollTop = box.scrollHeight - keepFromBottom.current;
      keepFromBottom.current = undefined;
    } else if (stickToBottom.current) box.scrollTop = box.scrollHeight;
  }, [transcript, streaming, showTools]);

  const items = transcriptItems(transcript.messages).filter((item) => showTools || item.type === "message");
  const streams = Object.entries(streaming);
  const now = useNow();

  return (
    <section class="session">
      <h1>
        Session <span class="key">{status.data?.sessionKey ?? sessionKey}</span>
      </h1>
      {status.error && /\bnot found\b|NOT_FOUND|no session/i.test(status.error) ? (
        <p class="notice">This session does not exist yet: sending a message creates it.</p>
      ) : (
        <ErrorText error={status.error} />
      )}
      <div class="session-grid">
        <section class="transcript" aria-labelledby="transcript-heading">
          <div class="transcript-head">
            <h2 id="transcript-heading">Transcript</h2>
            <label class="inline">
              <input
                type="checkbox"
                checked={showTools}
                onChange={(e) =>
                  navigate(
                    href(`/sessions/${encodeURIComponent(sessionKey)}`, {
                      tools: (e.target as HTMLInputElement).checked ? undefined : "hide",
                    }),
                    { replace: true },
                  )
                }
              />
              Show tool calls
            </label>
          </div>
          <ErrorText error={historyError} />
          <div
            class="log"
            ref={logRef}
            role="log"
            aria-label="Transcript entries"
            // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must take focus so keyboard users can scroll it
            tabIndex={0}
            onScroll={(e) => {
              const box = e.currentTarget;
              stickToBottom.current = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
              if (box.scrollTop < 80) void loadOlder();
            }}
          >
            {transcript.nextBefore !== undefined ? (
              <button type="button" class="older" disabled={olderLoading} onClick={() => void loadOlder()}>
                {olderLoading ? "Loading older entries…" : "Load older entries"}
              </button>
            ) : transcript.loaded ? (
              <p class="muted start">Start of the transcript.</p>
            ) : (
              <p class="muted">Loading the transcript…</p>
            )}
            <ol class="entries">
              {items.map((item) =>
                item.type === "message" ? (
                  <MessageEntry
                    key={`m${item.message.seq}`}
                    message={item.message}
                    text={item.text}
                    now={now}
                  />
                ) : (
                  <ToolEntry key={`t${item.id}`} item={item} />
                ),
              )}
              {streams.map(([runId, text]) => (
                <li key={`s${runId}`} class="entry role-assistant streaming">
                  <div class="meta">
                    <strong>assistant</strong> <span class="muted">writing… (run {runId})</span>
                  </div>
                  <div class="text">{text}</div>
                </li>
              ))}
            </ol>
            {transcript.loaded && items.length === 0 && streams.length === 0 && (
              <p class="muted">No messages yet.</p>
            )}
          </div>
          <SendBox
            sessionKey={sessionKey}
            onSent={() => {
              // A first message creates the session; its status names the canonical key events use.
              status.reload();
              refreshTranscript();
            }}
          />
        </section>
        <aside class="side">
          {status.data && <StatusPanel status={status.data} now={now} />}
          {status.data && role.value === "operator" && (
            <Actions status={status.data} onChanged={status.reload} />
          )}
        </aside>
      </div>
    </section>
  );
}

function isNotFound(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === "NOT_FOUND";
}

function MessageEntry({ message, text, now }: { message: HistoryMessage; text: string; now: number }) {
  const from = provenanceText(message.provenance);
  return (
    <li class={`entry role-${message.role}`}>
      <div class="meta">
        <strong>{message.role}</strong>
        {from && <span class="provenance">{from}</span>}
        <Level level={message.label} title="label of this entry" />
        <Ago ts={message.ts} now={now} />
      </div>
      <div class="text">{text}</div>
      {message.clipped && (
        <p class="muted">Clipped: the whole entry is {message.clipped.bytes} bytes (read it with the CLI).</p>
      )}
    </li>
  );
}

function ToolEntry({ item }: { item: ToolCallItem }) {
  const outcome = item.result ? (toolStatus(item.result.value) ?? "done") : "waiting for the result";
  return (
    <li class="entry tool">
      <details>
        <summary>
          Tool call <code>{item.name}</code> <span class={`badge st-${outcome}`}>{outcome}</span>{" "}
          <Level level={item.label} title="label of the call" />
        </summary>
        <div class="tool-body">
          <h3>Arguments</h3>
          <pre>{prettyJson(item.args)}</pre>
          <h3>Result</h3>
          {item.result ? (
            <>
              <Level level={item.result.label} title="label of the result" />
              <pre>{prettyJson(item.result.value)}</pre>
            </>
          ) : (
            <p class="muted">No result yet.</p>
          )}
        </div>
      </details>
    </li>
  );
}

function SendBox({ sessionKey, onSent }: { sessionKey: string; onSent: () => void }) {
  const [text, setText] = useState("");
  const [wait, setWait] = useState(true);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const [outcome, setOutcome] = useState<string | undefined>(undefined);
  return (
    <form
      class="send"
      aria-label="Send a message"
      onSubmit={async (event) => {
        event.preventDefault();
        if (text.trim() === "") {
          setError("Message: must not be empty");
          return;
        }
        setBusy(true);
        setError(undefined);
        setOutcome(undefined);
        try {
          const accepted = await api().chat.send({ sessionKey, message: text });
          setText("");
          onSent();
          if (!wait) {
            setOutcome(`Sent (run ${accepted.runId}).`);
            return;
          }
          setOutcome(`Sent (run ${accepted.runId}); waiting for the reply…`);
          const ended = await api().agent.wait({ runId: accepted.runId, timeoutMs: 120_000 });
          setOutcome(
            ended.status === "ok"
              ? `Reply: ${ended.reply ?? ""}`
              : ended.status === "timeout"
                ? "No reply yet (still running after 2 minutes); it will appear in the transcript."
                : `The run failed: ${ended.error ?? "no reason given"}`,
          );
        } catch (failure) {
          setError(errorMessage(failure));
        } finally {
          setBusy(false);
        }
      }}
    >
      <label for="message">Message</label>
      <textarea
        id="message"
        rows={3}
        value={text}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey))
            (e.currentTarget.form as HTMLFormElement).requestSubmit();
        }}
      />
      <div class="row">
        <label class="inline">
          <input
            type="checkbox"
            checked={wait}
            onChange={(e) => setWait((e.target as HTMLInputElement).checked)}
          />
          Wait for the reply
        </label>
        <button type="submit" disabled={busy}>
          {busy ? "Sending…" : "Send"}
        </button>
      </div>
      <ErrorText error={error} />
      {outcome && (
        <output class="outcome" aria-live="polite">
          {outcome}
        </output>
      )}
    </form>
  );
}

function StatusPanel({ status, now }: { status: SessionStatusResult; now: number }) {
  return (
    <>
      <Panel title="Status">
        <dl class="facts">
          <dt>Taint</dt>
          <dd>
            <Level level={status.taint} />
          </dd>
          <dt>Clearance</dt>
          <dd>
            <Level level={status.clearance} />
          </dd>
          <dt>Kind</dt>
          <dd>{status.kind}</dd>
          <dt>Channel</dt>
          <dd>{status.channel}</dd>
          <dt>Agent</dt>
          <dd>{status.agentId}</dd>
          <dt>Model</dt>
          <dd>{status.model ?? "agent default"}</dd>
          <dt>Tokens</dt>
          <dd>{status.totalTokens ?? 0}</dd>
          <dt>Label</dt>
          <dd>{status.label ?? "none"}</dd>
          <dt>Send policy</dt>
          <dd>{status.sendPolicy === "deny" ? "off" : status.sendPolicy === "allow" ? "on" : "inherit"}</dd>
          <dt>Active run</dt>
          <dd>
            {status.activeRun ? (
              <a href={runHref(status.activeRun.runId)}>
                {status.activeRun.runId} ({status.activeRun.lane}, since{" "}
                <Ago ts={status.activeRun.startedAt} now={now} />)
              </a>
            ) : (
              "none"
            )}
          </dd>
          {status.queuedRuns ? (
            <>
              <dt>Queued runs</dt>
              <dd>{status.queuedRuns}</dd>
            </>
          ) : null}
          <dt>Updated</dt>
          <dd>
            <Ago ts={status.updatedAt} now={now} />
          </dd>
        </dl>
      </Panel>
      <Panel title="Spawn tree">
        <p>
          Parent:{" "}
          {status.spawnedBy ? <SessionLink sessionKey={status.spawnedBy} /> : <span class="muted">none</span>}
        </p>
        {status.children && status.children.length > 0 ? (
          <ul class="children">
            {status.children.map((child) => (
              <li key={child.key}>
                <SessionLink sessionKey={child.key} />{" "}
                <span class={`badge st-${child.status}`}>{child.status}</span>
                {child.label ? <span class="muted"> {child.label}</span> : null}
              </li>
            ))}
          </ul>
        ) : (
          <p class="muted">No sub-agents.</p>
        )}
      </Panel>
    </>
  );
}

type Pending = "reset" | "delete" | { clearance: string } | undefined;

function Actions({ status, onChanged }: { status: SessionStatusResult; onChanged: () => void }) {
  const [label, setLabel] = useState(status.label ?? "");
  const [policy, setPolicy] = useState(status.sendPolicy ?? "inherit");
  const [clearance, setClearance] = useState<string>(status.clearance);
  const [pending, setPending] = useState<Pending>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [done, setDone] = useState<string | undefined>(undefined);
  const key = status.sessionKey;

  async function run(what: string, action: () => Promise<unknown>): Promise<void> {
    setError(undefined);
    setDone(undefined);
    try {
      await action();
      setDone(what);
      setPending(undefined);
      onChanged();
    } catch (failure) {
      setError(errorMessage(failure));
    }
  }

  const lowering =
    LEVELS.indexOf(clearance as (typeof LEVELS)[number]) <
    LEVELS.indexOf(status.taint as (typeof LEVELS)[number]);

  return (
    <Panel title="Actions">
      <form
        class="stack"
        onSubmit={(e) => {
          e.preventDefault();
          void run("Label set.", () =>
            api().sessions.patch({ key, label: label.trim() === "" ? null : label.trim() }),
          );
        }}
      >
        <label for="label">Label</label>
        <div class="row">
          <input
            id="label"
            value={label}
            maxLength={64}
            onInput={(e) => setLabel((e.target as HTMLInputElement).value)}
          />
          <button type="submit">Set label</button>
        </div>
      </form>
      <form
        class="stack"
        onSubmit={(e) => {
          e.preventDefault();
          void run("Send policy set.", () =>
            api().sessions.patch({
              key,
              sendPolicy: policy === "inherit" ? null : (policy as "allow" | "deny"),
            }),
          );
        }}
      >
        <label for="send-policy">Send policy</label>
        <div class="row">
          <select
            id="send-policy"
            value={policy}
            onChange={(e) => setPolicy((e.target as HTMLSelectElement).value as typeof policy)}
          >
            <option value="inherit">inherit</option>
            <option value="allow">on (allow)</option>
            <option value="deny">off (deny)</option>
          </select>
          <button type="submit">Set send policy</button>
        </div>
      </form>
      <form
        class="stack"
        onSubmit={(e) => {
          e.preventDefault();
          if (lowering) setPending({ clearance });
          else
            void run("Clearance set.", () =>
              api().sessions.patch({ key, clearance: clearance as (typeof LEVELS)[number] }),
            );
        }}
      >
        <label for="clearance">Clearance</label>
        <div class="row">
          <select
            id="clearance"
            value={clearance}
            onChange={(e) => setClearance((e.target as HTMLSelectElement).value)}
          >
            {LEVELS.map((level) => (
              <option key={level} value={level}>
                {level}
              </option>
            ))}
          </select>
          <button type="submit">Set clearance</button>
        </div>
      </form>
      <div class="row danger-zone">
        <button type="button" class="danger" onClick={() => setPending("reset")}>
          Reset…
        </button>
        <button type="button" class="danger" onClick={() => setPending("delete")}>
          Delete…
        </button>
      </div>
      {pending && (
        <div class="confirm" role="alertdialog" aria-labelledby="confirm-text">
          <p id="confirm-text">
            {pending === "reset"
              ? `Reset ${key}? It starts a new, empty transcript (the old one stays on disk).`
              : pending === "delete"
                ? `Delete ${key}? The session and its transcript go away.`
                : `Lower the clearance of ${key} to ${pending.clearance}, below its taint ${status.taint}? It then holds data above its clearance.`}
          </p>
          <div class="row">
            <button
              type="button"
              class="danger"
              onClick={() => {
                if (pending === "reset") void run("Session reset.", () => api().sessions.reset({ key }));
                else if (pending === "delete")
                  void run("Session deleted.", async () => {
                    await api().sessions.delete({ key });
                    navigate(href("/sessions"));
                  });
                else
                  void run("Clearance set.", () =>
                    api().sessions.patch({
                      key,
                      clearance: pending.clearance as (typeof LEVELS)[number],
                      force: true,
                    }),
                  );
              }}
            >
              {pending === "reset"
                ? "Confirm reset"
                : pending === "delete"
                  ? "Confirm delete"
                  : "Confirm lower clearance"}
            </button>
            <button type="button" onClick={() => setPending(undefined)}>
              Cancel
            </button>
          </div>
        </div>
      )}
      <ErrorText error={error} />
      {done && <output aria-live="polite">{done}</output>}
      <p class="muted small">Every change here is written to the audit log.</p>
    </Panel>
  );
}
