import { useState } from "preact/hooks";
import { signIn, signInError, signingIn } from "../lib/connection";

export function SignInView() {
  const [token, setToken] = useState("");
  const error = signInError.value;
  return (
    <main id="main" class="signin">
      <h1>Switchboard</h1>
      <p>Sign in with the operator token `pnpm start` printed (or a client token).</p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (token.trim() !== "") void signIn(token.trim());
        }}
      >
        <label for="token">Token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          required
          value={token}
          onInput={(event) => setToken((event.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={signingIn.value}>
          {signingIn.value ? "Signing in…" : "Sign in"}
        </button>
      </form>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </main>
  );
}
