import { SESSION_KINDS, type SessionRow } from "@switchboard/core";
import { useEffect, useState } from "preact/hooks";
import { api, role } from "../lib/connection";
import { useLoad, useNow, useThrottled } from "../lib/hooks";
import { liveRevision, runs } from "../lib/live";
import { current, href, navigate, runHref, sessionHref } from "../lib/router";
import { Ago, ErrorText, Level, SessionLink } from "./parts";

/** Rows per page of `sessions.list` (newest first); older pages load on demand with its cursor. */
const PAGE = 100;

export function SessionsView() {
  if (role.value !== "operator") return <OpenByKey />;
  return <SessionsTable />;
}

/** A client token cannot list sessions: it opens the ones it may read by key. */
function OpenByKey() {
  const [key, setKey] = useState("");
  return (
    <section>
      <h1>Sessions</h1>
      <p>This token is a client token: it cannot list sessions, only open those it is allowed to read.</p>
      <form
        class="row"
        onSubmit={(event) => {
          event.preventDefault();
          if (key.trim()) navigate(sessionHref(key.trim()));
        }}
      >
        <label for="open-key">Session key</label>
        <input id="open-key" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} />
        <button type="submit">Open</button>
      </form>
    </section>
  );
}

function SessionsTable() {
  const query = current.value.query;
  const kind = query.get("kind") ?? "";
  const agent = query.get("agent") ?? "";
  const active = query.get("active") ?? "";
  const search = query.get("q") ?? "";
  const [searchText, setSearchText] = useState(search);
  const now = useNow();

  const agents = useLoad(() => api().agents.list({}), []);
  const filters = {
    limit: PAGE,
    ...(kind ? { kinds: [kind] } : {}),
    ...(agent ? { agentId: agent } : {}),
    ...(Number(active) > 0 ? { activeMinutes: Number(active) } : {}),
    ...(search ? { search } : {}),
  };
  const list = useLoad(() => api().sessions.list(filters), [kind, agent, active, search]);
  // Older pages, appended on demand; the first page stays live (it is what changes).
  const [older, setOlder] = useState<{ rows: SessionRow[]; hidden: number; cursor?: string | undefined }>({
    rows: [],
    hidden: 0,
  });
  const [loadingMore, setLoadingMore] = useState(false);
  const [moreError, setMoreError] = useState<string | undefined>(undefined);
  useEffect(() => setOlder({ rows: [], hidden: 0 }), [kind, agent, active, search]);
  const cursor = older.rows.length > 0 ? older.cursor : list.data?.nextCursor;
  async function loadMore(): Promise<void> {
    if (!cursor) return;
    setLoadingMore(true);
    try {
      const page = await api().sessions.list({ ...filters, cursor });
      setOlder((previous) => ({
        rows: [...previous.rows, ...page.sessions],
        hidden: previous.hidden + page.hidden,
        cursor: page.nextCursor,
      }));
      setMoreError(undefined);
    } catch (failure) {
      setMoreError(failure instanceof Error ? failure.message : String(failure));
    } finally {
      setLoadingMore(false);
    }
  }

  // Rows follow the gateway: any session change reloads the page of rows, at most once a second.
  const refresh = useThrottled(list.reload, 1000);
  useEffect(() => {
    const client = api();
    const offs = [
      client.on("session.updated", refresh),
      client.on("session.taint", refresh),
      client.on("run.started", refresh),
      client.on("run.ended", refresh),
    ];
    return () => {
      for (const off of offs) off();
    };
  }, []);

  // Typing narrows the list after a short pause; the filter is kept in the URL.
  useEffect(() => {
    if (searchText === search) return;
    const id = setTimeout(() => setFilter("q", searchText), 250);
    return () => clearTimeout(id);
  }, [searchText]);

  function setFilter(name: string, value: string): void {
    const next = { kind, agent, active, q: search, [name]: value };
    navigate(href("/sessions", next), { replace: true });
  }

  void liveRevision.value;
  const activeRuns = new Map<string, string>();
  for (const run of runs.values()) if (run.status === "running") activeRuns.set(run.sessionKey, run.runId);

  // A row updated since its page loaded is in the first page now: it is shown once, there.
  const shown = new Set<string>();
  const rows: SessionRow[] = [];
  for (const row of [...(list.data?.sessions ?? []), ...older.rows]) {
    if (shown.has(row.key)) continue;
    shown.add(row.key);
    rows.push(row);
  }
  const hidden = (list.data?.hidden ?? 0) + older.hidden;
  return (
    <section>
      <h1>Sessions</h1>
      <form class="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <div class="field">
          <label for="f-search">Search</label>
          <input
            id="f-search"
            type="search"
            value={searchText}
            placeholder="key, label or name"
            onInput={(e) => setSearchText((e.target as HTMLInputElement).value)}
          />
        </div>
        <div class="field">
          <label for="f-kind">Kind</label>
          <select
            id="f-kind"
            value={kind}
            onChange={(e) => setFilter("kind", (e.target as HTMLSelectElement).value)}
          >
            <option value="">all</option>
            {SESSION_KINDS.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="f-agent">Agent</label>
          <select
            id="f-agent"
            value={agent}
            onChange={(e) => setFilter("agent", (e.target as HTMLSelectElement).value)}
          >
            <option value="">all</option>
            {(agents.data?.agents ?? []).map((a) => (
              <option key={a.id} value={a.id}>
                {a.id}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="f-active">Active within (minutes)</label>
          <input
            id="f-active"
            type="number"
            min="0"
            value={active}
            onChange={(e) => setFilter("active", (e.target as HTMLInputElement).value)}
          />
        </div>
      </form>
      <ErrorText error={list.error} />
      <p class="summary" aria-live="polite">
        {list.data
          ? `${cursor ? `The ${rows.length} most recently updated sessions` : `${rows.length} sessions`}${
              hidden ? `, ${hidden} hidden by visibility rules` : ""
            }${cursor ? " — older ones below the table, or narrow with the search and filters." : "."}`
          : "Loading sessions…"}
      </p>
      <div class="table-wrap">
        <table class="sessions">
          <caption class="sr-only">Sessions</caption>
          <thead>
            <tr>
              <th scope="col">Key</th>
              <th scope="col">Kind</th>
              <th scope="col">Channel</th>
              <th scope="col">Agent</th>
              <th scope="col">Taint</th>
              <th scope="col">Clearance</th>
              <th scope="col">Updated</th>
              <th scope="col">Label</th>
              <th scope="col">Active run</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((row) => (
              <tr key={row.key}>
                <td>
                  <SessionLink sessionKey={row.key} />
                  {row.displayName && <div class="muted">{row.displayName}</div>}
                </td>
                <td>{row.kind}</td>
                <td>{row.channel}</td>
                <td>{row.agentId}</td>
                <td>
                  <Level level={row.taint} title="taint: the highest label of data this session holds" />
                </td>
                <td>
                  <Level level={row.clearance} title="clearance: the highest label it may receive" />
                </td>
                <td>
                  <Ago ts={row.updatedAt} now={now} />
                </td>
                <td>{row.label ?? ""}</td>
                <td>
                  {activeRuns.has(row.key) ? (
                    <a class="badge working" href={runHref(activeRuns.get(row.key)!)}>
                      working
                    </a>
                  ) : row.abortedLastRun ? (
                    <span class="badge failed">last run failed</span>
                  ) : (
                    ""
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <ErrorText error={moreError} />
      {cursor && (
        <p>
          <button type="button" onClick={() => void loadMore()} disabled={loadingMore}>
            {loadingMore ? "Loading…" : `Show ${PAGE} older sessions`}
          </button>
        </p>
      )}
    </section>
  );
}
