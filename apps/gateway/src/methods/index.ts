import { isSwitchboardError, type MethodName } from "@switchboard/core";
import type { Logger } from "pino";
import type { Connection } from "../connection";
import type { RefusalLog } from "../ports/refusal-audit";
import type { RequestObserver } from "../telemetry/telemetry";
import { agentMethods } from "./agents";
import { auditMethods } from "./audit";
import type { MethodDeps } from "./deps";
import { eventMethods } from "./events";
import type { HandlerMap, MethodHandler } from "./handler";
import { policyMethods } from "./policy";
import { runMethods } from "./runs";
import { sessionMethods } from "./sessions";
import { toolMethods } from "./tools";

export type { MethodDeps } from "./deps";
export type { HandlerMap, MethodHandler, ParsedParams } from "./handler";

/** The whole handler map; a method no namespace handles is a compile error here. */
export function createHandlers(deps: MethodDeps): HandlerMap {
  return {
    ...sessionMethods(deps),
    ...runMethods(deps),
    ...agentMethods(deps),
    ...toolMethods(deps),
    ...policyMethods(deps),
    ...auditMethods(deps),
    ...eventMethods(deps),
  };
}

export type Dispatch = (
  method: MethodName,
  params: unknown,
  connection: Connection,
) => Promise<Record<string, unknown>>;

/**
 * Runs one protocol method with params the transport already parsed. A refusal (FORBIDDEN) is
 * audited here, once for every method, unless it is a policy decision (it names its `ruleId`),
 * which the policy service has audited already.
 */
export function createDispatch(
  handlers: HandlerMap,
  refusals: RefusalLog,
  log: Logger,
  observer?: RequestObserver,
): Dispatch {
  const dispatch: Dispatch = async (method, params, connection) => {
    try {
      // The transport validated `params` against this method's schema before calling.
      return await (handlers[method] as MethodHandler<MethodName>)(params as never, connection);
    } catch (error) {
      if (
        isSwitchboardError(error) &&
        error.code === "FORBIDDEN" &&
        (error.details as { ruleId?: unknown } | undefined)?.ruleId === undefined
      ) {
        const identity = connection.identity;
        await refusals
          .refused(identity?.tokenName ?? "anonymous", {
            method,
            role: identity?.role ?? "none",
            message: error.message,
          })
          .catch((auditError) => log.error({ err: auditError }, "refusal audit failed"));
      }
      throw error;
    }
  };
  // Telemetry off: the plain dispatcher, with no wrapper on the hot path.
  if (!observer) return dispatch;
  return (method, params, connection) =>
    observer.request(method, params, connection.identity?.role, () => dispatch(method, params, connection));
}
