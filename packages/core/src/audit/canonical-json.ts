import { SwitchboardError } from "../errors";

/**
 * Deterministic JSON: object keys sorted (by UTF-16 code unit, like `Array.prototype.sort`) at every
 * depth, no whitespace. Two values that are equal as JSON data always give the same string, which is
 * what makes a hash over it reproducible on another machine or after a restart.
 *
 * Follows `JSON.stringify` where that is unambiguous (object properties whose value is `undefined`
 * are omitted, `toJSON` is honoured, `-0` is written `0`) and refuses where `JSON.stringify` would
 * silently change the data: non-finite numbers, `undefined`/functions/symbols inside arrays, bigints,
 * cycles and non-plain objects such as `Map` or `Set` (which would become `{}`).
 */
export function canonicalJson(value: unknown): string {
  const out = write(value, [], new Set());
  if (out === undefined) {
    throw canonicalError("$", `cannot encode ${describe(value)} as JSON`);
  }
  return out;
}

/**
 * Where `write` is, as segments: an error names it (`$.a.list[1]`). Kept as a stack and joined only
 * for an error, since every audit record is encoded and a path string per property was most of it.
 */
type Path = Array<string | number>;

function pathText(path: Path): string {
  let text = "$";
  for (const part of path) text += typeof part === "number" ? `[${part}]` : `.${part}`;
  return text;
}

function write(value: unknown, path: Path, seen: Set<object>): string | undefined {
  if (value === null) return "null";
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value))
        throw canonicalError(pathText(path), `number ${String(value)} is not finite`);
      return JSON.stringify(value);
    case "bigint":
      throw canonicalError(pathText(path), "bigint values are not JSON; convert to a string or number first");
    case "undefined":
    case "function":
    case "symbol":
      // Omitted when an object property (the caller skips it); an error anywhere else.
      return undefined;
  }

  const object = value as object;
  if (typeof (object as { toJSON?: unknown }).toJSON === "function") {
    return write((object as { toJSON: () => unknown }).toJSON(), path, seen);
  }
  if (seen.has(object)) throw canonicalError(pathText(path), "circular reference");
  seen.add(object);
  try {
    if (Array.isArray(object)) {
      let out = "[";
      for (let index = 0; index < object.length; index++) {
        path.push(index);
        const item: unknown = object[index];
        const encoded = write(item, path, seen);
        if (encoded === undefined) {
          throw canonicalError(pathText(path), `${describe(item)} is not allowed in an array`);
        }
        path.pop();
        out += index === 0 ? encoded : `,${encoded}`;
      }
      return `${out}]`;
    }
    const prototype = Object.getPrototypeOf(object);
    if (prototype !== Object.prototype && prototype !== null) {
      throw canonicalError(pathText(path), `${describe(object)} is not a plain object`);
    }
    const record = object as Record<string, unknown>;
    let out = "{";
    let first = true;
    for (const key of Object.keys(record).sort()) {
      path.push(key);
      const encoded = write(record[key], path, seen);
      path.pop();
      if (encoded === undefined) continue;
      out += `${first ? "" : ","}${JSON.stringify(key)}:${encoded}`;
      first = false;
    }
    return `${out}}`;
  } finally {
    seen.delete(object);
  }
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "function") return "a function";
  if (typeof value === "symbol") return "a symbol";
  if (typeof value === "object" && value !== null) {
    const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
    return typeof name === "string" && name !== "" ? `a ${name}` : "an object";
  }
  return typeof value;
}

function canonicalError(path: string, reason: string): SwitchboardError {
  return new SwitchboardError("INVALID_REQUEST", `canonical JSON: ${path}: ${reason}`, {
    details: { path, reason },
  });
}
