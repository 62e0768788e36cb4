/**
 * Connection URLs carry the password; nothing the store logs or throws may show it. These helpers
 * are the only way the URL leaves `openPostgresStore`.
 */

/** The URL with its password replaced by `***` (and unparsable input reduced to its scheme). */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== "") parsed.password = "***";
    return parsed.toString();
  } catch {
    const scheme = /^[a-z]+:\/\//i.exec(url)?.[0] ?? "";
    return `${scheme}(unparsable URL)`;
  }
}

/** `host:port/database`, for messages that say where the database is. */
export function describeTarget(url: string): string {
  try {
    const parsed = new URL(url);
    const host = parsed.hostname || "localhost";
    const port = parsed.port || "5432";
    const database = decodeURIComponent(parsed.pathname.replace(/^\//, "")) || "(default database)";
    return `${host}:${port}/${database}`;
  } catch {
    return "(unparsable URL)";
  }
}

/** The password of a URL, so error texts can be scrubbed of it (empty when there is none). */
export function passwordOf(url: string): string {
  try {
    return decodeURIComponent(new URL(url).password);
  } catch {
    return "";
  }
}
