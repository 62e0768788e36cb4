// Figures of a benchmark: value, same-run baseline, ratio, target and verdict, printed as a table
// and kept for `bench/results/latest.json`.
import { formatBytes, formatCount, formatMs, median, round } from "./stats.mjs";

const format = (value, unit) => {
  if (value === undefined || value === null) return "-";
  switch (unit) {
    case "ms":
      return formatMs(value);
    case "bytes":
      return formatBytes(value);
    case "/s":
      return `${formatCount(value)}/s`;
    case "x":
      return `${value.toFixed(2)}x`;
    default:
      return `${round(value, 2)}${unit ? ` ${unit}` : ""}`;
  }
};

/**
 * One reported figure. `target` is `{ op: "<=" | ">=", value }` in the figure's unit; figures
 * without a target are informational. `reps` are the per-repetition values the figure is the
 * median of.
 */
export function figure({
  label,
  value,
  unit,
  baseline,
  baselineLabel,
  target,
  reps,
  note,
  targetText,
  pass: verdict,
}) {
  const ratio = baseline ? value / baseline : undefined;
  const pass =
    verdict ?? (target ? (target.op === "<=" ? value <= target.value : value >= target.value) : undefined);
  return {
    label,
    value: round(value),
    unit,
    ...(reps ? { reps: reps.map((rep) => round(rep)) } : {}),
    ...(baseline !== undefined ? { baseline: round(baseline), baselineLabel } : {}),
    ...(ratio !== undefined ? { ratio: Number(ratio.toPrecision(3)) } : {}),
    ...(target || targetText
      ? { target: targetText ?? `${target.op} ${format(target.value, unit)}`, pass }
      : {}),
    ...(note ? { note } : {}),
  };
}

/** Runs `measure` once per repetition; returns the median of its values and the values. */
export async function repeated(reps, measure) {
  const values = [];
  for (let rep = 0; rep < reps; rep++) values.push(await measure(rep));
  return { value: median(values), reps: values };
}

function formatRatio(ratio) {
  if (ratio >= 100) return `${ratio.toFixed(0)}x`;
  if (ratio >= 0.1) return `${ratio.toFixed(2)}x`;
  return `${ratio.toPrecision(2)}x`;
}

export function printResult(definition, result) {
  const verdict = result.pass === undefined ? "" : result.pass ? "PASS" : "MISS";
  console.log(`\n${definition.id}  ${definition.title}  ${verdict}`);
  console.log(`    target: ${definition.target}`);
  const rows = result.figures.map((item) => [
    item.label,
    format(item.value, item.unit),
    item.baseline !== undefined ? `${format(item.baseline, item.unit)} (${item.baselineLabel})` : "",
    item.ratio !== undefined ? formatRatio(item.ratio) : "",
    item.target ? `${item.target} ${item.pass ? "PASS" : "MISS"}` : "",
  ]);
  const header = ["figure (median of reps)", "value", "baseline (same run)", "ratio", "target"];
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => row[column].length)),
  );
  const line = (cells) =>
    `    ${cells.map((cell, column) => cell.padEnd(widths[column])).join("  ")}`.trimEnd();
  console.log(line(header));
  for (const row of rows) console.log(line(row));
  for (const item of result.figures) if (item.note) console.log(`    - ${item.label.trim()}: ${item.note}`);
  for (const note of result.notes ?? []) console.log(`    note: ${note}`);
}
