import { useEffect, useState } from "preact/hooks";
import { api } from "../lib/connection";
import { auditMatches, auditRow } from "../lib/format";
import { useLoad, useNow, useThrottled } from "../lib/hooks";
import { current, href, navigate } from "../lib/router";
import { Ago, ErrorText, errorMessage } from "./parts";

const LIMIT = 500;

type Verified = {
  ok: boolean;
  entries: number;
  firstBadIndex?: number | undefined;
  reason?: string | undefined;
};

export function AuditView() {
  const query = current.value.query;
  const kind = query.get("kind") ?? "";
  const text = query.get("q") ?? "";
  const [search, setSearch] = useState(text);
  const tail = useLoad(() => api().audit.tail({ limit: LIMIT }), []);
  const refresh = useThrottled(tail.reload, 1000);
  const [verified, setVerified] = useState<Verified | undefined>(undefined);
  const [verifyError, setVerifyError] = useState<string | undefined>(undefined);
  const [verifying, setVerifying] = useState(false);
  const now = useNow();

  useEffect(() => api().on("audit.appended", refresh), []);
  useEffect(() => {
    if (search === text) return;
    const id = setTimeout(() => navigate(href("/audit", { kind, q: search }), { replace: true }), 250);
    return () => clearTimeout(id);
  }, [search]);

  const rows = (tail.data?.entries ?? []).map(auditRow).reverse();
  const kinds = [...new Set(rows.map((r) => r.kind))].sort();
  const shown = rows.filter((row) => auditMatches(row, text, kind));

  return (
    <section>
      <h1>Audit</h1>
      <div class="row verify">
        <button
          type="button"
          disabled={verifying}
          onClick={async () => {
            setVerifying(true);
            setVerifyError(undefined);
            try {
              setVerified(await api().audit.verify({}));
            } catch (error) {
              setVerifyError(errorMessage(error));
            } finally {
              setVerifying(false);
            }
          }}
        >
          {verifying ? "Verifying…" : "Verify"}
        </button>
        <output aria-live="polite" class={verified ? (verified.ok ? "ok" : "error") : ""}>
          {verified
            ? verified.ok
              ? `The audit chain is intact: ${verified.entries} entries verified.`
              : `The audit chain is broken at index ${verified.firstBadIndex ?? "?"}: ${verified.reason ?? "hash mismatch"}.`
            : "Verify checks every entry's hash link from the first to the last."}
        </output>
      </div>
      <ErrorText error={verifyError} />
      <form class="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <div class="field">
          <label for="a-filter">Filter</label>
          <input
            id="a-filter"
            type="search"
            value={search}
            placeholder="rule, session, reason…"
            onInput={(e) => setSearch((e.target as HTMLInputElement).value)}
          />
        </div>
        <div class="field">
          <label for="a-kind">Kind</label>
          <select
            id="a-kind"
            value={kind}
            onChange={(e) =>
              navigate(href("/audit", { kind: (e.target as HTMLSelectElement).value, q: text }), {
                replace: true,
              })
            }
          >
            <option value="">all</option>
            {[...new Set([...kinds, kind].filter(Boolean))].map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
        </div>
      </form>
      <ErrorText error={tail.error} />
      <p class="summary">
        {tail.data
          ? `${shown.length} of the latest ${rows.length} entries, newest first.`
          : "Loading the audit log…"}
      </p>
      <div class="table-wrap">
        <table class="audit">
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">When</th>
              <th scope="col">Kind</th>
              <th scope="col">Decision</th>
              <th scope="col">Rule</th>
              <th scope="col">Hook</th>
              <th scope="col">Caller</th>
              <th scope="col">Target</th>
              <th scope="col">Reason</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((row) => (
              <tr key={row.index}>
                <td>{row.index}</td>
                <td>
                  <Ago ts={row.at} now={now} />
                </td>
                <td>{row.kind}</td>
                <td>
                  {row.decision && (
                    <span class={`badge decision-${row.decision.toLowerCase()}`}>{row.decision}</span>
                  )}
                </td>
                <td>{row.rule}</td>
                <td>{row.hook}</td>
                <td class="key">{row.caller}</td>
                <td class="key">{row.target}</td>
                <td>{row.reason}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
