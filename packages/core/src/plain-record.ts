import { z } from "zod";

/**
 * `z.record(z.string(), value)` that refuses a key named `__proto__`. zod builds the record by
 * assignment, which turns such a key into the new object's prototype: the key silently vanishes
 * (and with it whatever it held). Where that matters — a policy rule's conditions (a dropped one
 * widens the rule), the audit record's data (a dropped key escapes the hash chain), label maps — the
 * key is an error instead.
 */
export function plainRecord<V extends z.ZodType>(value: V, params?: { error?: string }) {
  return z
    .unknown()
    .superRefine((input, ctx) => {
      if (typeof input === "object" && input !== null && Object.hasOwn(input, "__proto__")) {
        ctx.addIssue({
          code: "custom",
          path: ["__proto__"],
          message: "a key named __proto__ is not allowed",
        });
      }
    })
    .pipe(z.record(z.string(), value, params));
}
