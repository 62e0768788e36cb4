import { useEffect } from "preact/hooks";
import { client } from "../lib/connection";
import { circleLayout, duration, uniqueEdges } from "../lib/format";
import { useNow } from "../lib/hooks";
import {
  blocked,
  edges,
  ensureProbe,
  isWaiting,
  liveRevision,
  probed,
  queued,
  type RunInfo,
  runs,
} from "../lib/live";
import { href, runHref } from "../lib/router";
import { Ago, Panel, SessionLink } from "./parts";

const HOUR = 3_600_000;
const RECENT = 15 * 60_000;

function RunList({ items, now, empty }: { items: RunInfo[]; now: number; empty: string }) {
  if (items.length === 0) return <p class="muted">{empty}</p>;
  return (
    <ul class="runs">
      {items.slice(0, 20).map((run) => (
        <li key={run.runId}>
          <SessionLink sessionKey={run.sessionKey} />{" "}
          <a class="muted" href={runHref(run.runId)}>
            run {run.runId.slice(0, 8)}
          </a>{" "}
          {run.status === "running" ? (
            <span class="muted">for {duration(now - run.startedAt)}</span>
          ) : (
            <>
              <Ago ts={run.endedAt ?? run.startedAt} now={now} />
              {run.error ? <span class="error-text"> {run.error}</span> : null}
            </>
          )}
        </li>
      ))}
    </ul>
  );
}

export function OverviewView() {
  useEffect(ensureProbe, [client.value]);
  void liveRevision.value;
  const now = useNow(2000);
  const all = [...runs.values()];
  const running = all.filter((r) => r.status === "running");
  const waiting = running.filter(isWaiting);
  const working = running.filter((r) => !isWaiting(r));
  const finished = all
    .filter((r) => r.status === "ok" && now - (r.endedAt ?? 0) < RECENT)
    .sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0));
  const failed = all
    .filter((r) => (r.status === "error" || r.status === "timeout") && now - (r.endedAt ?? 0) < HOUR)
    .sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0));
  const blocks = blocked.value.filter((b) => now - b.at < HOUR);
  const queuedTotal = [...queued.values()].reduce((sum, n) => sum + Math.max(0, n), 0);

  return (
    <section>
      <h1>Overview</h1>
      <p class="muted">
        What needs attention now{probed.value ? "" : " (loading…)"}. Finished and failed runs are those seen
        since this page opened, plus the runs in progress it found.
      </p>
      <ul class="tiles" aria-label="Counts">
        <li class="tile working">
          <span class="n">{working.length}</span> working
        </li>
        <li class="tile waiting">
          <span class="n">{waiting.length}</span> waiting
        </li>
        <li class="tile finished">
          <span class="n">{finished.length}</span> finished
        </li>
        <li class="tile failed">
          <span class="n">{failed.length}</span> failed
        </li>
        <li class="tile blocked">
          <span class="n">{blocks.length}</span> blocked
        </li>
        {queuedTotal > 0 && (
          <li class="tile">
            <span class="n">{queuedTotal}</span> queued
          </li>
        )}
      </ul>
      <div class="grid">
        <Panel title="Working">
          <RunList items={working} now={now} empty="No run in progress." />
        </Panel>
        <Panel title="Waiting">
          <RunList items={waiting} now={now} empty="No session is waiting on another." />
        </Panel>
        <Panel title="Recently finished">
          <RunList items={finished} now={now} empty="Nothing finished in the last 15 minutes." />
        </Panel>
        <Panel title="Failed">
          <RunList items={failed} now={now} empty="No failed run in the last hour." />
        </Panel>
        <Panel title="Blocked calls (last hour)">
          {blocks.length === 0 ? (
            <p class="muted">Nothing was blocked in the last hour.</p>
          ) : (
            <ul class="blocks">
              {blocks.slice(0, 20).map((b, i) => (
                <li key={`${b.at}-${i}`}>
                  <Ago ts={b.at} now={now} />{" "}
                  {b.sessionKey ? <SessionLink sessionKey={b.sessionKey} /> : null}
                  {b.target ? (
                    <>
                      {" → "}
                      <span class="key">{b.target}</span>
                    </>
                  ) : null}{" "}
                  <span class="badge decision-block">{b.ruleId ?? b.hook}</span>
                  <div class="reason">{b.message}</div>
                </li>
              ))}
            </ul>
          )}
          <p>
            <a href={href("/audit", { kind: "policy.blocked" })}>All blocked calls in the audit log</a>
          </p>
        </Panel>
        <Topology running={running} />
      </div>
    </section>
  );
}

const WIDTH = 560;
const HEIGHT = 360;

/** Sessions as nodes, sends and spawns as edges, for chains with a run in progress or just ended. */
function Topology({ running }: { running: RunInfo[] }) {
  const now = Date.now();
  const hot = new Set<string>();
  for (const run of runs.values()) {
    if (run.status === "running" || now - (run.endedAt ?? 0) < RECENT) hot.add(run.sessionKey);
  }
  const shown = uniqueEdges([...edges.values()].filter((e) => hot.has(e.from) || hot.has(e.to)));
  const nodes = [...new Set(shown.flatMap((e) => [e.from, e.to]))].slice(0, 24);
  const positions = circleLayout(nodes, WIDTH, HEIGHT);
  const busy = new Set(running.map((r) => r.sessionKey));
  return (
    <Panel title="Topology of active chains">
      {shown.length === 0 ? (
        <p class="muted">No agent-to-agent sends or spawns in the active chains.</p>
      ) : (
        <>
          <svg
            class="topology"
            viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
            role="img"
            aria-label="Who is talking to whom"
          >
            <defs>
              <marker
                id="arrow"
                viewBox="0 0 10 10"
                refX="10"
                refY="5"
                markerWidth="8"
                markerHeight="8"
                orient="auto"
              >
                <path d="M0,0 L10,5 L0,10 z" class="arrowhead" />
              </marker>
            </defs>
            {shown.map((edge) => {
              const a = positions.get(edge.from);
              const b = positions.get(edge.to);
              if (!a || !b) return null;
              const dx = b.x - a.x;
              const dy = b.y - a.y;
              const length = Math.hypot(dx, dy) || 1;
              const pad = 14;
              // Shifted to the right of its direction, so a reply edge does not hide the send.
              const nx = (-dy / length) * 5;
              const ny = (dx / length) * 5;
              return (
                <line
                  key={`${edge.kind}${edge.from}${edge.to}`}
                  class={`edge edge-${edge.kind}`}
                  x1={a.x + (dx / length) * pad + nx}
                  y1={a.y + (dy / length) * pad + ny}
                  x2={b.x - (dx / length) * pad + nx}
                  y2={b.y - (dy / length) * pad + ny}
                  marker-end="url(#arrow)"
                />
              );
            })}
            {nodes.map((node) => {
              const p = positions.get(node)!;
              return (
                <g key={node} class={busy.has(node) ? "node busy" : "node"}>
                  <circle cx={p.x} cy={p.y} r="10" />
                  <text x={p.x} y={p.y + 26} text-anchor="middle">
                    {node.length > 36 ? `…${node.slice(-35)}` : node}
                  </text>
                </g>
              );
            })}
          </svg>
          <ul class="edges">
            {shown.map((edge) => (
              <li key={`l${edge.kind}${edge.from}${edge.to}`}>
                <SessionLink sessionKey={edge.from} /> {edge.kind === "spawn" ? "spawned" : "sent to"}{" "}
                <SessionLink sessionKey={edge.to} />
              </li>
            ))}
          </ul>
        </>
      )}
    </Panel>
  );
}
