import { type SimulateResult, TOOL_NAMES } from "@switchboard/core";
import { useState } from "preact/hooks";
import { api } from "../lib/connection";
import { parseArgs } from "../lib/format";
import { useLoad } from "../lib/hooks";
import { current } from "../lib/router";
import { ErrorText, errorMessage, Level } from "./parts";

const EXAMPLE_ARGS: Record<string, string> = {
  sessions_send: '{"sessionKey": "main", "message": "hello"}',
  sessions_history: '{"sessionKey": "main"}',
  sessions_spawn: '{"task": "look something up"}',
  sessions_list: "{}",
  session_status: "{}",
};

export function PolicyView() {
  const query = current.value.query;
  const [as, setAs] = useState(query.get("as") ?? "main");
  const [tool, setTool] = useState(query.get("tool") ?? "sessions_send");
  const [args, setArgs] = useState(query.get("args") ?? EXAMPLE_ARGS.sessions_send!);
  const [result, setResult] = useState<SimulateResult | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const recent = useLoad(() => api().sessions.list({ limit: 100 }), []);

  return (
    <section>
      <h1>Policy simulator</h1>
      <p class="muted">
        What would happen if a session called a tool: the decision and every rule evaluated. Nothing is sent,
        changed or audited.
      </p>
      <form
        class="simulate stack"
        onSubmit={async (event) => {
          event.preventDefault();
          setError(undefined);
          setResult(undefined);
          const parsed = parseArgs(args);
          if (!parsed.ok) {
            setError(parsed.error);
            return;
          }
          setBusy(true);
          try {
            const answer = await api().policy.simulate({ as, tool, args: parsed.value });
            if ("decision" in answer) setResult(answer);
            else setError(`${answer.status}: ${answer.error}`);
          } catch (failure) {
            setError(errorMessage(failure));
          } finally {
            setBusy(false);
          }
        }}
      >
        <label for="sim-as">Calling session</label>
        <input
          id="sim-as"
          list="sim-sessions"
          value={as}
          required
          onInput={(e) => setAs((e.target as HTMLInputElement).value)}
        />
        <datalist id="sim-sessions">
          {(recent.data?.sessions ?? []).map((row) => (
            <option key={row.key} value={row.key} />
          ))}
        </datalist>
        <label for="sim-tool">Tool</label>
        <select
          id="sim-tool"
          value={tool}
          onChange={(e) => {
            const next = (e.target as HTMLSelectElement).value;
            setTool(next);
            if (EXAMPLE_ARGS[next]) setArgs(EXAMPLE_ARGS[next]!);
          }}
        >
          {TOOL_NAMES.map((name) => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
        <label for="sim-args">Arguments (JSON)</label>
        <textarea
          id="sim-args"
          rows={5}
          spellcheck={false}
          value={args}
          onInput={(e) => setArgs((e.target as HTMLTextAreaElement).value)}
        />
        <div>
          <button type="submit" disabled={busy}>
            {busy ? "Simulating…" : "Simulate"}
          </button>
        </div>
      </form>
      <ErrorText error={error} />
      {result && (
        <section class="panel" aria-labelledby="decision-heading">
          <h2 id="decision-heading">
            Decision: <span class={`badge decision-${result.decision.toLowerCase()}`}>{result.decision}</span>
          </h2>
          <p>{result.message}</p>
          <dl class="facts">
            <dt>Rule</dt>
            <dd>{result.ruleId ?? "none (no rule matched)"}</dd>
            <dt>Taint now</dt>
            <dd>
              <Level level={result.taint.current} />
            </dd>
            <dt>Taint after</dt>
            <dd>
              <Level level={result.taint.after} />
            </dd>
          </dl>
          <table>
            <caption>Rules evaluated, in order</caption>
            <thead>
              <tr>
                <th scope="col">Rule</th>
                <th scope="col">Matched</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {result.evaluated.map((rule, i) => (
                <tr key={`${rule.ruleId}-${i}`} class={rule.matched ? "matched" : ""}>
                  <td>{rule.ruleId}</td>
                  <td>{rule.matched ? "yes" : "no"}</td>
                  <td>{rule.action}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
    </section>
  );
}
