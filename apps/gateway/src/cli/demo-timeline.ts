import type { Check, TimelineEntry } from "./demo-scenario";
import { describeEvent } from "./event-text";

/** Timeline entries in order: the demo's notes and the gateway's events, worded for a reader. */
export function timelineLines(
  entries: readonly TimelineEntry[],
  runKinds: ReadonlyMap<string, string>,
): string[] {
  const rows = entries.flatMap((entry) => {
    if (entry.kind === "step") return [{ at: entry.at, actor: "", text: `── ${entry.text} ──`, step: true }];
    if (!entry.event) return [{ at: entry.at, actor: entry.actor, text: entry.text, step: false }];
    const described = describeEvent(entry.event);
    if (!described) return [];
    const runId = (entry.event.payload as { runId?: string }).runId;
    const kind = runId ? runKinds.get(runId) : undefined;
    const text = entry.event.event === "run.started" && kind ? `${kind}: ${described.text}` : described.text;
    return [{ at: entry.at, actor: described.actor, text, step: false }];
  });
  const width = Math.max(8, ...rows.map((row) => row.actor.length));
  return rows.map((row) =>
    row.step
      ? `\n${row.text}`
      : `${`+${(row.at / 1000).toFixed(3)}s`.padStart(9)}  ${row.actor.padEnd(width)}  ${row.text}`,
  );
}

export function checkLines(checks: readonly Check[]): string[] {
  return checks.map((check) => `${check.ok ? "✓" : "✗"} ${check.name}: ${check.detail}`);
}
