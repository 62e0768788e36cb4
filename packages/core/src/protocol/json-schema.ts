import { z } from "zod";
import { Events } from "./events";
import { EventFrameSchema, RequestFrameSchema, ResponseFrameSchema } from "./frames";
import { ConnectParamsSchema, ConnectResultSchema, Methods } from "./methods";

/** JSON Schema of the whole protocol, for docs and non-TypeScript integrators. */
export function protocolJsonSchema(): Record<string, unknown> {
  const methods: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(Methods)) {
    methods[name] = {
      params: z.toJSONSchema(def.params, { io: "input", unrepresentable: "any" }),
      result: z.toJSONSchema(def.result, { unrepresentable: "any" }),
    };
  }
  const events: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(Events))
    events[name] = z.toJSONSchema(schema, { unrepresentable: "any" });
  return {
    frames: {
      request: z.toJSONSchema(RequestFrameSchema),
      response: z.toJSONSchema(ResponseFrameSchema),
      event: z.toJSONSchema(EventFrameSchema),
    },
    connect: { params: z.toJSONSchema(ConnectParamsSchema), result: z.toJSONSchema(ConnectResultSchema) },
    methods,
    events,
  };
}
