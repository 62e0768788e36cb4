import { z } from "zod";

export type JsonSchemaObject = Record<string, unknown>;

/**
 * Keywords some provider rejects or mis-reads. OpenAI, Anthropic and Gemini all accept a plain
 * `{type: "object", properties, required}` tree; `$schema`, `additionalProperties` and
 * `propertyNames` are the ones that break Gemini's OpenAPI-subset schema parser.
 */
const DROPPED_KEYWORDS = new Set(["$schema", "$id", "additionalProperties", "propertyNames"]);
const COMBINATORS = ["anyOf", "oneOf", "allOf", "$ref", "not"] as const;

/**
 * JSON Schema of a tool's zod parameter schema, cut down to what every major model provider accepts:
 * a top-level `type: "object"` with `properties`, a `required` list only when non-empty, plain types
 * and no combinators. Throws (at definition time, never at a model) if the schema cannot be expressed
 * that way, so a schema change that would break a provider fails the tests instead.
 */
export function toProviderJsonSchema(schema: z.ZodType): JsonSchemaObject {
  const raw = z.toJSONSchema(schema, { io: "input", unrepresentable: "throw" }) as JsonSchemaObject;
  const cleaned = clean(raw, "(root)");
  if (cleaned.type !== "object")
    throw new Error(`tool parameters must be an object schema, got ${String(cleaned.type)}`);
  const out: JsonSchemaObject = { type: "object", properties: cleaned.properties ?? {} };
  if (typeof cleaned.description === "string") out.description = cleaned.description;
  if (Array.isArray(cleaned.required) && cleaned.required.length > 0) out.required = cleaned.required;
  return out;
}

function clean(node: JsonSchemaObject, where: string): JsonSchemaObject {
  for (const keyword of COMBINATORS) {
    if (keyword in node) throw new Error(`${where}: "${keyword}" is not accepted by every model provider`);
  }
  const out: JsonSchemaObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (DROPPED_KEYWORDS.has(key)) continue;
    if (key === "type" && Array.isArray(value)) {
      // `["string", "null"]` from a nullable: providers want one plain type; null is treated as absent anyway.
      const types = value.filter((t) => t !== "null");
      if (types.length !== 1)
        throw new Error(`${where}: a union type ${JSON.stringify(value)} has no plain form`);
      out.type = types[0];
    } else if (key === "properties" && isObject(value)) {
      const properties: JsonSchemaObject = {};
      for (const [name, child] of Object.entries(value)) {
        properties[name] = isObject(child) ? clean(child, `${where}.${name}`) : child;
      }
      out.properties = properties;
    } else if (key === "items" && isObject(value)) {
      out.items = clean(value, `${where}[]`);
    } else {
      out[key] = value;
    }
  }
  return out;
}

function isObject(value: unknown): value is JsonSchemaObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
