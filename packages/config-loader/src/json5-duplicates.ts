import JSON5 from "json5";

/** Where a key stands in the text (1-based, as editors count). */
export interface TextPosition {
  line: number;
  column: number;
}

export interface DuplicateKey {
  key: string;
  /** The repeated occurrence. */
  at: TextPosition;
  /** The first occurrence, in the same object. */
  first: TextPosition;
}

type Frame = { object: true; keys: Map<string, TextPosition>; expectKey: boolean } | { object: false };

// ZWNJ and ZWJ (U+200C, U+200D) may continue an identifier too (ECMAScript, as JSON5 reads it).
const IDENTIFIER_PART = /[\p{ID_Continue}$\\]|\u200C|\u200D/u;
const IDENTIFIER_START = /[\p{ID_Start}$_\\]/u;

/**
 * The first key that an object of `text` (a document `JSON5.parse` accepted) names twice. JSON5
 * keeps the last of them without a word, so a config that sets `agents` twice would run on the
 * second alone; YAML refuses the same thing. Keys are compared as the parser reads them: `agents`,
 * `"agents"` and `\u0061gents` are one key. Strings and comments are skipped, not read.
 */
export function findDuplicateKey(text: string): DuplicateKey | undefined {
  const stack: Frame[] = [];
  let index = 0;
  let line = 1;
  let column = 1;
  const step = (count: number) => {
    for (let end = index + count; index < end; index++) {
      const char = text[index];
      // JSON5's line terminators; CR LF counts once.
      if (
        char === "\n" ||
        char === "\u2028" ||
        char === "\u2029" ||
        (char === "\r" && text[index + 1] !== "\n")
      ) {
        line++;
        column = 1;
      } else column++;
    }
  };
  /** Length of the string token starting at `index` (quote to quote, escapes included). */
  const stringLength = () => {
    const quote = text[index];
    let end = index + 1;
    while (end < text.length && text[end] !== quote) end += text[end] === "\\" ? 2 : 1;
    return end + 1 - index;
  };
  const identifierLength = () => {
    let end = index + 1;
    while (end < text.length && IDENTIFIER_PART.test(text[end]!)) end += text[end] === "\\" ? 6 : 1;
    return end - index;
  };

  while (index < text.length) {
    const char = text[index]!;
    const top = stack.at(-1);
    if (char === "/" && text[index + 1] === "/") {
      let end = index;
      while (end < text.length && !/[\n\r\u2028\u2029]/.test(text[end]!)) end++;
      step(end - index);
    } else if (char === "/" && text[index + 1] === "*") {
      const close = text.indexOf("*/", index + 2);
      step((close === -1 ? text.length : close + 2) - index);
    } else if (
      top?.object &&
      top.expectKey &&
      (char === '"' || char === "'" || IDENTIFIER_START.test(char))
    ) {
      const length = char === '"' || char === "'" ? stringLength() : identifierLength();
      const token = text.slice(index, index + length);
      // The parser's own reading of the key, escapes and all.
      const key = Object.keys(JSON5.parse(`{${token}:0}`) as object)[0]!;
      const at = { line, column };
      const first = top.keys.get(key);
      if (first) return { key, at, first };
      top.keys.set(key, at);
      top.expectKey = false;
      step(length);
    } else if (char === '"' || char === "'") {
      step(stringLength());
    } else {
      if (char === "{") stack.push({ object: true, keys: new Map(), expectKey: true });
      else if (char === "[") stack.push({ object: false });
      else if (char === "}" || char === "]") stack.pop();
      else if (char === "," && top?.object) top.expectKey = true;
      step(1);
    }
  }
  return undefined;
}
