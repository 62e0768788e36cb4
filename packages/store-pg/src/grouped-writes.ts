/**
 * Group commit for independent single-row writes: at most one statement runs at a time, and the
 * writes asked for meanwhile go together in the next one (`writeMany`, one result per item in
 * order). Each write still resolves only once its row is committed. If a group's statement fails,
 * its writes are retried one by one (`writeOne`), so one bad row fails alone. Callers keep at most
 * one write per row in flight (the store's per-key order), so a group never holds a row twice.
 */
export class GroupedWrites<T, R> {
  private pending: Array<{ item: T; resolve: (result: R) => void; reject: (error: unknown) => void }> = [];
  private writing = false;

  constructor(
    private readonly writeMany: (items: T[]) => Promise<R[]>,
    private readonly writeOne: (item: T) => Promise<R>,
  ) {}

  write(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.writing) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.pending.length > 0) {
      const group = this.pending;
      this.pending = [];
      try {
        const results = await this.writeMany(group.map((entry) => entry.item));
        for (const [index, entry] of group.entries()) entry.resolve(results[index]!);
      } catch (error) {
        if (group.length === 1) group[0]!.reject(error);
        else
          await Promise.all(
            group.map((entry) => this.writeOne(entry.item).then(entry.resolve, entry.reject)),
          );
      }
    }
    this.writing = false;
  }
}
