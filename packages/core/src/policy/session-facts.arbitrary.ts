import fc from "fast-check";
import { LEVELS } from "../labels/level";
import type { SessionFacts } from "./context";

/**
 * Test data (fast-check) shared by the property tests of discovery and of visibility as data; not
 * part of the package (excluded from its build and typecheck like the tests).
 */
export const levelArbitrary = fc.constantFrom(...LEVELS);

/** Sessions of the given keys with random labels, sandboxing and parent; the agent comes from the key. */
export function sessionFactsArbitrary(keys: readonly string[]): fc.Arbitrary<SessionFacts> {
  return fc
    .record({
      key: fc.constantFrom(...keys),
      kind: fc.constantFrom("main", "group", "subagent" as const),
      channel: fc.constantFrom("discord", "internal"),
      taint: levelArbitrary,
      clearance: levelArbitrary,
      sandboxed: fc.option(fc.boolean(), { nil: undefined }),
      spawnedBy: fc.option(fc.constantFrom(...keys), { nil: undefined }),
    })
    .map((facts) => ({ ...facts, agentId: facts.key.split(":")[1] as string }));
}
