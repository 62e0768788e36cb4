import { describe, expect, it } from "vitest";
import { findDuplicateKey } from "./json5-duplicates";

describe("findDuplicateKey", () => {
  it("finds a key an object names twice, with both positions", () => {
    const text = '{\n  agents: { list: [] },\n  gateway: { port: 1 },\n  "agents": {},\n}';
    expect(findDuplicateKey(text)).toEqual({
      key: "agents",
      at: { line: 4, column: 3 },
      first: { line: 2, column: 3 },
    });
  });

  it("reads keys as the parser does: quoted, single-quoted, unquoted and escaped are one key", () => {
    expect(findDuplicateKey("{ 'port': 1, \\u0070ort: 2 }")?.key).toBe("port");
    expect(findDuplicateKey('{ "a\\u0062": 1, ab: 2 }')?.key).toBe("ab");
    expect(findDuplicateKey("{ $x_1: 1, '$x_1': 2 }")?.key).toBe("$x_1");
    expect(findDuplicateKey('{ a\u200Db: 1, "a\\u200Db": 2 }')?.key).toBe("a\u200Db");
  });

  it("finds a repeat deep inside arrays and objects", () => {
    const text = `{ agents: { list: [ { id: "a" }, { id: "b", model: "x", model: "y" } ] } }`;
    expect(findDuplicateKey(text)).toMatchObject({ key: "model", at: { line: 1, column: 57 } });
  });

  it("allows the same key in different objects, and ignores keys in strings and comments", () => {
    const text = `// agents: 1, agents: 2
{
  /* id: 1, id: 2 */
  list: [ { id: "a", note: "id: 1, id: 2" }, { id: 'b', note: 'it\\'s { id: 3 }' } ],
  nested: { list: [], id: 1 },
  id: 2,
}`;
    expect(findDuplicateKey(text)).toBeUndefined();
    expect(findDuplicateKey("[1, 2, {a: 1}, {a: 2}]")).toBeUndefined();
    expect(findDuplicateKey('"just a string"')).toBeUndefined();
  });

  it("counts lines across CR LF, CR and U+2028 line ends", () => {
    expect(findDuplicateKey("{\r\n a: 1,\r\n a: 2 }")?.at).toEqual({ line: 3, column: 2 });
    expect(findDuplicateKey("{\r a: 1,\u2028 a: 2 }")?.at).toEqual({ line: 3, column: 2 });
  });
});
