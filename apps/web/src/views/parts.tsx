import type { ComponentChildren } from "preact";
import { levelClass, relativeTime } from "../lib/format";
import { sessionHref } from "../lib/router";

/** A label level as a coloured badge; the word is always there too (colour is never the only cue). */
export function Level({ level, title }: { level: string | undefined; title?: string }) {
  if (!level) return <span class="muted">–</span>;
  return (
    <span class={levelClass(level)} title={title}>
      {level}
    </span>
  );
}

export function Ago({ ts, now }: { ts: number; now: number }) {
  return (
    <time dateTime={new Date(ts).toISOString()} title={new Date(ts).toLocaleString()}>
      {relativeTime(ts, now)}
    </time>
  );
}

export function SessionLink({ sessionKey }: { sessionKey: string }) {
  return (
    <a class="key" href={sessionHref(sessionKey)}>
      {sessionKey}
    </a>
  );
}

/** The gateway's error, verbatim, announced to screen readers. */
export function ErrorText({ error }: { error: string | undefined }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error}
    </p>
  );
}

export function Panel({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  const headingId = `${id ?? title.toLowerCase().replace(/\W+/g, "-")}-heading`;
  return (
    <section class="panel" aria-labelledby={headingId}>
      <h2 id={headingId}>{title}</h2>
      {children}
    </section>
  );
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
