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
  const out = write(value, "$", new Set());
  if (out === undefined) {
    throw canonicalError("$", `cannot encode ${describe(value)} as JSON`);
  }
  return out;
}

function write(value: unknown, path: string, seen: Set<object>): string | undefined {
  if (value === null) return "null";
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw canonicalError(path, `number ${String(value)} is not finite`);
      return JSON.stringify(value);
    case "bigint":
      throw canonicalError(path, "bigint values are not JSON; convert to a string or number first");
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
  if (seen.has(object)) throw canonicalError(path, "circular reference");
  seen.add(object);
  try {
    if (Array.isArray(object)) {
      const parts = object.map((item, index) => {
        const itemPath = `${path}[${index}]`;
        const encoded = write(item, itemPath, seen);
        if (encoded === undefined) {
          throw canonicalError(itemPath, `${describe(item)} is not allowed in an array`);
        }
        return encoded;
      });
      return `[${parts.join(",")}]`;
    }
    const prototype = Object.getPrototypeOf(object);
    if (prototype !== Object.prototype && prototype !== null) {
      throw canonicalError(path, `${describe(object)} is not a plain object`);
    }
    const record = object as Record<string, unknown>;
    const parts: string[] = [];
    for (const key of Object.keys(record).sort()) {
      const encoded = write(record[key], `${path}.${key}`, seen);
      if (encoded !== undefined) parts.push(`${JSON.stringify(key)}:${encoded}`);
    }
    return `{${parts.join(",")}}`;
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
