import { signal } from "@preact/signals";

/** Every view has its own URL under /ui/ (the gateway answers them all with the app). */
export const BASE = "/ui";

export interface Location {
  /** Path below /ui, always starting with "/". */
  path: string;
  query: URLSearchParams;
}

function read(): Location {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  return { path: path === "" ? "/" : path, query: new URLSearchParams(location.search) };
}

export const current = signal<Location>(read());

addEventListener("popstate", () => {
  current.value = read();
});

/** `href` of a view: `/ui` + path. */
export function href(path: string, query?: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {}))
    if (value !== undefined && value !== "") params.set(name, value);
  const search = params.toString();
  return `${BASE}${path}${search ? `?${search}` : ""}`;
}

export function navigate(url: string, { replace = false }: { replace?: boolean } = {}): void {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  current.value = read();
  if (!replace) scrollTo(0, 0);
}

/** The URL of a session's view (keys may hold any character, so they are encoded). */
export function sessionHref(key: string): string {
  return `${BASE}/sessions/${encodeURIComponent(key)}`;
}

export function runHref(runId: string): string {
  return `${BASE}/runs/${encodeURIComponent(runId)}`;
}

/** Link clicks inside the app change the view without reloading the page. */
export function onLinkClick(event: MouseEvent): void {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey)
    return;
  const anchor = (event.target as Element | null)?.closest?.("a");
  if (!anchor || anchor.target || anchor.origin !== location.origin) return;
  if (!anchor.pathname.startsWith(`${BASE}/`) && anchor.pathname !== BASE) return;
  event.preventDefault();
  navigate(anchor.pathname + anchor.search);
}
