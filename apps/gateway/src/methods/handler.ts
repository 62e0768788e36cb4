import type { MethodName, MethodResult, Methods } from "@switchboard/core";
import type { z } from "zod";
import type { Connection } from "../connection";

/** A method's params after the transport parsed them with its zod schema (defaults applied). */
export type ParsedParams<M extends MethodName> = z.output<(typeof Methods)[M]["params"]>;

/**
 * One protocol method: its params and result are the method's declared schemas in core's `Methods`,
 * so a handler returning the wrong shape is a compile error rather than a client surprise.
 */
export type MethodHandler<M extends MethodName> = (
  params: ParsedParams<M>,
  connection: Connection,
) => Promise<MethodResult<M>>;

/** The handlers of some methods (one namespace module's part of the map). */
export type Handlers<K extends MethodName> = { [M in K]: MethodHandler<M> };

/** Every method's handler; a method without one is a compile error where the map is assembled. */
export type HandlerMap = Handlers<MethodName>;
