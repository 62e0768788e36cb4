import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  CallToolRequestSchema,
  ErrorCode,
  InitializeRequestSchema,
  isJSONRPCRequest,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  PingRequestSchema,
  ReadResourceRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { boundedIssueText, formatZodIssues } from "@switchboard/core";
import type { z } from "zod";

/** The SDK's own request schemas of every method this server answers, by method. */
const REQUEST_SCHEMAS = new Map<string, z.ZodType>(
  [
    InitializeRequestSchema,
    PingRequestSchema,
    ListToolsRequestSchema,
    CallToolRequestSchema,
    ListResourcesRequestSchema,
    ListResourceTemplatesRequestSchema,
    ReadResourceRequestSchema,
  ].map((schema) => [schema.shape.method.value, schema]),
);

/**
 * The SDK parses a request with its schema before any handler runs and answers a mismatch with -32603
 * (internal error) and zod's issue list as raw JSON, e.g. a `tools/call` whose `name` is a number.
 * This server checks requests of the methods it answers against the same schemas as the transport
 * hands them over, and answers a bad one -32602 (invalid params) naming each field and rule.
 */
export class GuardedMcpServer extends Server {
  override async connect(transport: Transport): Promise<void> {
    await super.connect(transport);
    const deliver = transport.onmessage;
    if (!deliver) return;
    transport.onmessage = (message, extra) => {
      if (isJSONRPCRequest(message)) {
        const refusal = invalidParams(message);
        if (refusal !== undefined) {
          const error = { code: ErrorCode.InvalidParams, message: refusal };
          transport
            .send({ jsonrpc: "2.0", id: message.id, error }, { relatedRequestId: message.id })
            .catch((cause: unknown) =>
              this.onerror?.(cause instanceof Error ? cause : new Error(String(cause))),
            );
          return;
        }
      }
      deliver.call(transport, message, extra);
    };
  }
}

/** Why `request` does not fit its method's schema, or undefined when it does (or the method is not ours). */
export function invalidParams(request: { method: string }): string | undefined {
  const schema = REQUEST_SCHEMAS.get(request.method);
  if (!schema) return undefined;
  const parsed = schema.safeParse(request);
  if (parsed.success) return undefined;
  return `${request.method}: ${boundedIssueText(formatZodIssues(parsed.error))}`;
}
