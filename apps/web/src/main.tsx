import { render } from "preact";
import { useEffect } from "preact/hooks";
import { client, connectionState, role, signIn, signOut, storedToken } from "./lib/connection";
import { tokenFromFragment } from "./lib/format";
import { reset as resetLive, startLive } from "./lib/live";
import { current, href, navigate, onLinkClick } from "./lib/router";
import { AgentsView, RunView } from "./views/agents";
import { AuditView } from "./views/audit";
import { OverviewView } from "./views/overview";
import { PolicyView } from "./views/policy";
import { SessionView } from "./views/session";
import { SessionsView } from "./views/sessions";
import { SignInView } from "./views/sign-in";

const NAV: Array<{ path: string; name: string; operatorOnly: boolean }> = [
  { path: "/", name: "Overview", operatorOnly: true },
  { path: "/sessions", name: "Sessions", operatorOnly: false },
  { path: "/agents", name: "Agents and runs", operatorOnly: true },
  { path: "/audit", name: "Audit", operatorOnly: true },
  { path: "/policy", name: "Policy", operatorOnly: true },
];

const STATE_TEXT: Record<string, string> = {
  connecting: "Connecting…",
  open: "Connected",
  reconnecting: "Reconnecting…",
  closed: "Disconnected",
  "signed-out": "Signed out",
};

/** Views of the whole gateway (every session's runs, the audit log, the policy): operators only. */
function operatorsOnly() {
  return (
    <section>
      <h1>Operators only</h1>
      <p>
        This view shows every session's activity; your token sees only its own sessions.{" "}
        <a href={href("/")}>Go to your sessions</a>.
      </p>
    </section>
  );
}

function viewFor(path: string) {
  const session = /^\/sessions\/(.+)$/.exec(path);
  if (session) return <SessionView key={session[1]} sessionKey={decodeURIComponent(session[1]!)} />;
  const operator = role.value === "operator";
  const run = /^\/runs\/(.+)$/.exec(path);
  if (run) return operator ? <RunView runId={decodeURIComponent(run[1]!)} /> : operatorsOnly();
  // ("/" is the client's own sessions list.)
  if (!operator && path !== "/" && NAV.some((item) => item.operatorOnly && item.path === path))
    return operatorsOnly();
  switch (path) {
    case "/":
      return role.value === "operator" ? <OverviewView /> : <SessionsView />;
    case "/sessions":
      return <SessionsView />;
    case "/agents":
      return <AgentsView />;
    case "/audit":
      return <AuditView />;
    case "/policy":
      return <PolicyView />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            There is no view at this address. <a href={href("/")}>Go to the overview</a>.
          </p>
        </section>
      );
  }
}

function isCurrent(path: string): boolean {
  const now = current.value.path;
  return path === "/" ? now === "/" : now === path || now.startsWith(`${path}/`);
}

function Shell() {
  const state = connectionState.value;
  const connected = client.value;
  useEffect(() => {
    if (!connected || role.value !== "operator") return;
    let stop: (() => void) | undefined;
    let cancelled = false;
    void startLive(connected).then(
      (off) => {
        if (cancelled) off();
        else stop = off;
      },
      () => undefined,
    );
    return () => {
      cancelled = true;
      stop?.();
      // What this operator saw goes with its connection: a token signing in next (a client's, in
      // the same tab) must not find another session's runs and replies in the live data.
      resetLive();
    };
  }, [connected]);

  if (!connected) return <SignInView />;
  const view = viewFor(current.value.path);
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Switchboard</span>
        <nav aria-label="Views">
          <ul>
            {NAV.filter((item) => role.value === "operator" || !item.operatorOnly).map((item) => (
              <li key={item.path}>
                <a href={href(item.path)} aria-current={isCurrent(item.path) ? "page" : undefined}>
                  {item.name}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <span class={`conn conn-${state}`} role="status" aria-live="polite">
          {STATE_TEXT[state] ?? state}
        </span>
        <span class="who">{role.value}</span>
        <button type="button" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <main id="main">{view}</main>
    </>
  );
}

/**
 * A token in the fragment (the link `pnpm start` prints) is read and removed from the address bar and
 * the history at once; fragments are never sent to the server.
 */
function takeFragmentToken(): string | undefined {
  const token = tokenFromFragment(location.hash);
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  return token;
}

async function boot(): Promise<void> {
  const fromFragment = takeFragmentToken();
  // The printed link opened in a tab already showing the UI changes only the fragment: no reload.
  addEventListener("hashchange", () => {
    const token = takeFragmentToken();
    if (token) void signOut().then(() => signIn(token));
  });
  document.addEventListener("click", onLinkClick);
  render(<Shell />, document.getElementById("app")!);
  const token = fromFragment ?? storedToken();
  if (token) await signIn(token);
  if (location.pathname === "/ui" || location.pathname === "/") navigate(href("/"), { replace: true });
}

void boot();
