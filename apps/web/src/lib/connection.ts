import { signal } from "@preact/signals";
import { type ConnectionState, connect, type SwitchboardClient } from "@switchboard/client";

/**
 * The one connection of the page. The token lives in `sessionStorage` only (gone when the tab closes,
 * never in a cookie, a URL sent to the server or a log); the gateway is the page's own origin.
 */
const TOKEN_KEY = "switchboard.token";

export type Role = "operator" | "client";

export const client = signal<SwitchboardClient | undefined>(undefined);
export const role = signal<Role>("operator");
export const connectionState = signal<ConnectionState | "signed-out">("signed-out");
/** Set when a sign-in was refused: the gateway's message, verbatim. */
export const signInError = signal<string | undefined>(undefined);
export const signingIn = signal(false);

export function storedToken(): string | undefined {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  } catch {
    return undefined;
  }
}

function gatewayUrl(): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/`;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

async function open(token: string, as: Role): Promise<SwitchboardClient> {
  return connect({
    url: gatewayUrl(),
    token,
    role: as,
    clientName: "switchboard-web",
    // The page can be left open for days: keep reconnecting, at most every 10 s.
    reconnect: { maxDelayMs: 10_000 },
  });
}

/**
 * Connects with `token`: as operator, or as a `client` when the gateway says the token is for that
 * role. A refusal shows the gateway's error and nothing else, and forgets the token.
 */
export async function signIn(token: string): Promise<boolean> {
  signingIn.value = true;
  signInError.value = undefined;
  try {
    let connection: SwitchboardClient;
    let as: Role = "operator";
    try {
      connection = await open(token, "operator");
    } catch (error) {
      if (!/is for role client\b/.test(message(error))) throw error;
      as = "client";
      connection = await open(token, "client");
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    role.value = as;
    connectionState.value = connection.state;
    connection.onStateChange((state) => {
      connectionState.value = state;
    });
    client.value = connection;
    return true;
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    signInError.value = message(error);
    return false;
  } finally {
    signingIn.value = false;
  }
}

export async function signOut(): Promise<void> {
  sessionStorage.removeItem(TOKEN_KEY);
  const current = client.value;
  client.value = undefined;
  connectionState.value = "signed-out";
  await current?.close();
}

/** The signed-in client; views render only when there is one. */
export function api(): SwitchboardClient {
  const current = client.value;
  if (!current) throw new Error("not signed in");
  return current;
}
