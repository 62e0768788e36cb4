import type { Db } from "./db";

/**
 * Point reads by key, grouped when many arrive at once: at most `maxInFlight` statements run at a
 * time, and the keys asked for meanwhile go together in the next one (`load` reads them all, e.g.
 * `WHERE key = ANY($1)`). Each read is still issued after its caller asked, so a caller sees every
 * write that was committed before it asked (its own included), as with one statement per read.
 * Under load this turns a send's dozen or so row reads from one round trip each into a few shared
 * ones; when the database keeps up, a read goes out at once as before.
 */
export class BatchedReads<T> {
  private pending = new Map<
    string,
    Array<{ resolve: (value: T | undefined) => void; reject: (error: unknown) => void }>
  >();
  private inFlight = 0;

  constructor(
    private readonly load: (keys: string[]) => Promise<Map<string, T>>,
    private readonly maxInFlight = 1,
  ) {}

  get(key: string): Promise<T | undefined> {
    return new Promise((resolve, reject) => {
      const waiting = this.pending.get(key);
      if (waiting) waiting.push({ resolve, reject });
      else this.pending.set(key, [{ resolve, reject }]);
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.pending.size > 0) {
      const batch = this.pending;
      this.pending = new Map();
      this.inFlight += 1;
      this.load([...batch.keys()])
        .then(
          (found) => {
            for (const [key, waiting] of batch) for (const caller of waiting) caller.resolve(found.get(key));
          },
          (error: unknown) => {
            for (const waiting of batch.values()) for (const caller of waiting) caller.reject(error);
          },
        )
        .finally(() => {
          this.inFlight -= 1;
          this.pump();
        });
    }
  }
}

/**
 * `BatchedReads` of the JSON `row` column of `table`, keyed by its text column `keyColumn`
 * (`action` names the read in errors).
 */
export function batchedRowReads<T>(
  db: Db,
  action: string,
  table: string,
  keyColumn: string,
): BatchedReads<T> {
  return new BatchedReads<T>(async (keys) => {
    const found = await db.read<{ id: string; row: T }>(
      action,
      `SELECT ${keyColumn} AS id, row FROM ${table} WHERE ${keyColumn} = ANY($1::text[])`,
      [keys],
    );
    return new Map(found.rows.map((hit) => [hit.id, hit.row]));
  });
}
