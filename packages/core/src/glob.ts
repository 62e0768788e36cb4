/**
 * Whole-string globs: `*` matches any run of characters; `?` one character, unless the pattern
 * language treats it as a literal (session-key patterns do). Compiled once, so a check on a hot
 * path (every event, every listed row) is a call, not a RegExp construction.
 */

export interface GlobOptions {
  /** Compare case-insensitively (both sides lower-cased, as agent ids are). Default false. */
  ignoreCase?: boolean;
  /** `any-char` (default): `?` matches one character. `literal`: `?` matches only itself. */
  questionMark?: "any-char" | "literal";
  /** Ignore whitespace around the pattern (hand-written config lists). Default false. */
  trimPattern?: boolean;
}

export type GlobMatcher = (text: string) => boolean;

const REGEXP_SPECIAL = /[\\^$.*+?()[\]{}|/-]/g;

export function compileGlob(pattern: string, options: GlobOptions = {}): GlobMatcher {
  const ignoreCase = options.ignoreCase === true;
  const questionIsWildcard = options.questionMark !== "literal";
  const trimmed = options.trimPattern === true ? pattern.trim() : pattern;
  const wanted = ignoreCase ? trimmed.toLowerCase() : trimmed;
  const fold = ignoreCase ? (text: string) => text.toLowerCase() : (text: string) => text;
  if (wanted === "*") return () => true;
  const hasWildcard = wanted.includes("*") || (questionIsWildcard && wanted.includes("?"));
  if (!hasWildcard) return (text) => fold(text) === wanted;
  let source = "";
  for (const char of wanted) {
    if (char === "*") source += ".*";
    else if (char === "?" && questionIsWildcard) source += ".";
    else source += char.replace(REGEXP_SPECIAL, "\\$&");
  }
  // `s`: a wildcard also spans line breaks.
  const regexp = new RegExp(`^${source}$`, "s");
  return (text) => regexp.test(fold(text));
}

interface CompiledList {
  readonly patterns: readonly string[];
  readonly matcher: GlobMatcher;
}

const listCache = new Map<string, WeakMap<readonly string[], CompiledList>>();

/**
 * True when `text` matches any of `patterns`. Lists usually come from config and are checked
 * over and over, so the compiled form is kept per array (weakly, so a replaced config frees it);
 * a list changed in place since is noticed and recompiled.
 */
export function matchesAnyGlob(
  patterns: readonly string[],
  text: string,
  options: GlobOptions = {},
): boolean {
  if (patterns.length === 0) return false;
  const optionsKey = `${options.ignoreCase === true}:${options.questionMark ?? "any-char"}:${options.trimPattern === true}`;
  let byList = listCache.get(optionsKey);
  if (byList === undefined) {
    byList = new WeakMap();
    listCache.set(optionsKey, byList);
  }
  let compiled = byList.get(patterns);
  if (compiled === undefined || !sameList(compiled.patterns, patterns)) {
    compiled = { patterns: [...patterns], matcher: compileGlobList(patterns, options) };
    byList.set(patterns, compiled);
  }
  return compiled.matcher(text);
}

/** One matcher for "any of these patterns". */
export function compileGlobList(patterns: readonly string[], options: GlobOptions = {}): GlobMatcher {
  const matchers = patterns.map((pattern) => compileGlob(pattern, options));
  return (text) => matchers.some((matches) => matches(text));
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
