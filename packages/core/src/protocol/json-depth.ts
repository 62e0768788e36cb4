import { z } from "zod";

/**
 * How deep tool arguments and results may nest (objects and arrays). Far beyond any real tool's
 * arguments; what matters is that a value this deep is refused before a call runs: serialising one
 * nested hundreds of thousands of levels deep (which `JSON.parse` accepts) overflows the stack, and
 * it did so only when the call's record was written, after the call had been made.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests deeper than `max` levels; iterative, so no depth overflows it. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (typeof item !== "object" || item === null) continue;
    if (depth >= max) return true;
    const inner = Array.isArray(item) ? item : Object.values(item);
    for (const child of inner)
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
  }
  return false;
}

const TOO_DEEP = `must not nest deeper than ${MAX_JSON_DEPTH} levels of objects and arrays`;

/** Tool arguments (an object of JSON values), bounded in depth. */
export const ToolArgsSchema = z
  .record(z.string(), z.unknown())
  .refine((args) => !nestsDeeperThan(args, MAX_JSON_DEPTH), { error: TOO_DEEP });

/** A tool's result as a worker reports it, bounded in depth. */
export const ToolResultValueSchema = z
  .unknown()
  .refine((value) => !nestsDeeperThan(value, MAX_JSON_DEPTH), { error: TOO_DEEP });
