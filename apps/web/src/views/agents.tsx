import { useEffect } from "preact/hooks";
import { api, client } from "../lib/connection";
import { duration } from "../lib/format";
import { useLoad, useNow } from "../lib/hooks";
import { ensureProbe, liveRevision, queued, runs } from "../lib/live";
import { href, runHref } from "../lib/router";
import { Ago, ErrorText, Level, Panel, SessionLink } from "./parts";

export function AgentsView() {
  useEffect(ensureProbe, [client.value]);
  const agents = useLoad(() => api().agents.list({}), []);
  void liveRevision.value;
  const now = useNow(2000);
  const all = [...runs.values()].sort((a, b) => b.startedAt - a.startedAt);
  const active = all.filter((r) => r.status === "running");
  const ended = all.filter((r) => r.status !== "running").slice(0, 50);
  const waitingSessions = [...queued.entries()].filter(([, n]) => n > 0);
  return (
    <section>
      <h1>Agents and runs</h1>
      <Panel title="Agents">
        <ErrorText error={agents.error} />
        <table>
          <thead>
            <tr>
              <th scope="col">Agent</th>
              <th scope="col">Name</th>
              <th scope="col">Configured</th>
              <th scope="col">Connected</th>
              <th scope="col">Workers</th>
            </tr>
          </thead>
          <tbody>
            {(agents.data?.agents ?? []).map((agent) => (
              <tr key={agent.id}>
                <td>
                  <a href={href("/sessions", { agent: agent.id })}>{agent.id}</a>
                </td>
                <td>{agent.name ?? ""}</td>
                <td>{agent.configured ? "yes" : "no"}</td>
                <td>
                  <span class={agent.connected ? "badge st-ok" : "badge st-error"}>
                    {agent.connected ? "connected" : "no worker"}
                  </span>
                </td>
                <td>{agent.workers}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <button type="button" onClick={agents.reload}>
          Refresh agents
        </button>
      </Panel>
      <Panel title="Active runs">
        {active.length === 0 ? (
          <p class="muted">No run in progress.</p>
        ) : (
          <table>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Session</th>
                <th scope="col">Agent</th>
                <th scope="col">Lane</th>
                <th scope="col">Age</th>
              </tr>
            </thead>
            <tbody>
              {active.map((run) => (
                <tr key={run.runId}>
                  <td>
                    <a href={runHref(run.runId)}>{run.runId}</a>
                  </td>
                  <td>
                    <SessionLink sessionKey={run.sessionKey} />
                  </td>
                  <td>{run.agentId}</td>
                  <td>{run.lane}</td>
                  <td>{duration(now - run.startedAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Panel>
      <Panel title="Queued runs">
        {waitingSessions.length === 0 ? (
          <p class="muted">No run is queued.</p>
        ) : (
          <ul>
            {waitingSessions.map(([key, n]) => (
              <li key={key}>
                <SessionLink sessionKey={key} />: {n} queued
              </li>
            ))}
          </ul>
        )}
      </Panel>
      <Panel title="Recent runs">
        {ended.length === 0 ? (
          <p class="muted">No run ended in the last hour.</p>
        ) : (
          <table>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Session</th>
                <th scope="col">Outcome</th>
                <th scope="col">Ended</th>
              </tr>
            </thead>
            <tbody>
              {ended.map((run) => (
                <tr key={run.runId}>
                  <td>
                    <a href={runHref(run.runId)}>{run.runId}</a>
                  </td>
                  <td>
                    <SessionLink sessionKey={run.sessionKey} />
                  </td>
                  <td>
                    <span class={`badge st-${run.status}`}>{run.status}</span>
                  </td>
                  <td>{run.endedAt ? <Ago ts={run.endedAt} now={now} /> : ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Panel>
    </section>
  );
}

export function RunView({ runId }: { runId: string }) {
  void liveRevision.value;
  const now = useNow(2000);
  const run = runs.get(runId);
  return (
    <section>
      <h1>
        Run <span class="key">{runId}</span>
      </h1>
      {!run ? (
        <p>
          This page has not seen this run (it ended before the page opened). Its entries are in the session's
          transcript.
        </p>
      ) : (
        <>
          <p>
            Session <SessionLink sessionKey={run.sessionKey} />, agent {run.agentId}, lane {run.lane},{" "}
            <span class={`badge st-${run.status}`}>{run.status}</span>
          </p>
          <Panel title="Timeline">
            <ol class="timeline">
              {run.timeline.map((event, i) => (
                <li key={`${event.at}-${i}`}>
                  <span class="muted">+{duration(event.at - run.startedAt)}</span> {event.text}
                </li>
              ))}
              {run.status === "running" && (
                <li class="muted">running for {duration(now - run.startedAt)}…</li>
              )}
            </ol>
          </Panel>
          {run.reply !== undefined && (
            <Panel title="Reply">
              <p>
                <Level level={run.label} title="label of the reply" />
              </p>
              <div class="text">{run.reply}</div>
            </Panel>
          )}
        </>
      )}
    </section>
  );
}
