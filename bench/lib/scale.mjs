// Benchmark sizes per scale. `small` is for development (about a minute), `default` is the
// contract run (< 10 minutes on 2 cores, including first-time data generation), `full` repeats
// more and runs B7 for the 2 minutes of the quality bar.
import { setting } from "./modules.mjs";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

export const SCALES = {
  small: {
    sessionCounts: [1_000, 10_000],
    historySizes: [10 * MiB, 100 * MiB],
    reps: 3,
    b1Reads: 100,
    b1TailRuns: 15,
    b2Lists: 100,
    b3Starts: 3,
    b4Seconds: 2,
    b4Writers: 64,
    b5Seconds: 2,
    b6Starts: 1,
    b7Seconds: 10,
    b7BaselineSeconds: 5,
    b7SnapshotEvery: 500,
  },
  default: {
    sessionCounts: [1_000, 10_000, 100_000],
    historySizes: [10 * MiB, 100 * MiB, GiB],
    reps: 3,
    b1Reads: 200,
    b1TailRuns: 30,
    b2Lists: 200,
    b3Starts: 5,
    b4Seconds: 4,
    b4Writers: 64,
    b5Seconds: 4,
    b6Starts: 3,
    b7Seconds: 30,
    b7BaselineSeconds: 10,
    b7SnapshotEvery: 1_000,
  },
  full: {
    sessionCounts: [1_000, 10_000, 100_000],
    historySizes: [10 * MiB, 100 * MiB, GiB],
    reps: 5,
    b1Reads: 500,
    b1TailRuns: 50,
    b2Lists: 500,
    b3Starts: 9,
    b4Seconds: 6,
    b4Writers: 64,
    b5Seconds: 8,
    b6Starts: 5,
    b7Seconds: 120,
    b7BaselineSeconds: 30,
    b7SnapshotEvery: 2_000,
  },
};

/**
 * The parameters of a run: a scale (BENCH_SCALE or --scale=) with single values overridden by
 * env `BENCH_<NAME>` (e.g. BENCH_B7_SECONDS=60, BENCH_REPS=5,
 * BENCH_HISTORY_SIZES=10485760,104857600).
 */
export function resolveScale(name) {
  const base = SCALES[name];
  if (!base) throw new Error(`unknown scale "${name}": use one of ${Object.keys(SCALES).join(", ")}`);
  const params = { scale: name, ...base };
  for (const field of Object.keys(base)) {
    const envName = `BENCH_${field.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase()}`;
    const raw = setting(envName);
    if (raw === undefined || raw === "") continue;
    const value = Array.isArray(base[field]) ? raw.split(",").map(Number) : Number(raw);
    if ((Array.isArray(value) ? value : [value]).some((n) => !Number.isFinite(n) || n <= 0)) {
      throw new Error(
        `${envName}: must be a positive number${Array.isArray(base[field]) ? " list (comma separated)" : ""}`,
      );
    }
    params[field] = value;
  }
  params.largestSessionCount = Math.max(...params.sessionCounts);
  return params;
}
