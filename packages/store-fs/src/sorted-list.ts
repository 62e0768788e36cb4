/**
 * A sorted collection kept as a list of small sorted blocks: insert and remove cost a binary
 * search plus a splice inside one block (O(√n)-ish moves instead of O(n) for one big array), and
 * iteration in order is a plain nested loop. Items must compare equal only to themselves.
 */
export class SortedList<T> {
  private blocks: T[][] = [];
  private count = 0;

  constructor(
    private readonly compare: (a: T, b: T) => number,
    private readonly blockSize = 512,
  ) {}

  get size(): number {
    return this.count;
  }

  /** Replaces the contents with `items` (sorted here, unless the caller says they are). */
  reset(items: T[], sortedAlready = false): void {
    const sorted = sortedAlready ? items : items.slice().sort(this.compare);
    this.blocks = [];
    for (let index = 0; index < sorted.length; index += this.blockSize) {
      this.blocks.push(sorted.slice(index, index + this.blockSize));
    }
    this.count = sorted.length;
  }

  insert(item: T): void {
    if (this.blocks.length === 0) {
      this.blocks.push([item]);
      this.count = 1;
      return;
    }
    const blockIndex = this.blockFor(item);
    const block = this.blocks[blockIndex]!;
    block.splice(this.position(block, item), 0, item);
    this.count++;
    if (block.length > this.blockSize * 2) {
      this.blocks.splice(blockIndex, 1, block.slice(0, this.blockSize), block.slice(this.blockSize));
    }
  }

  /** Removes the item equal to `item` (by `compare`); returns whether it was there. */
  remove(item: T): boolean {
    if (this.blocks.length === 0) return false;
    const blockIndex = this.blockFor(item);
    const block = this.blocks[blockIndex]!;
    const at = this.position(block, item);
    if (at >= block.length || this.compare(block[at]!, item) !== 0) return false;
    block.splice(at, 1);
    this.count--;
    if (block.length === 0) this.blocks.splice(blockIndex, 1);
    return true;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (const block of this.blocks) yield* block;
  }

  /** Visits items in order until `visit` returns false; faster than the iterator on hot paths. */
  forEachUntil(visit: (item: T) => boolean): void {
    for (const block of this.blocks) {
      for (let index = 0; index < block.length; index++) {
        if (!visit(block[index]!)) return;
      }
    }
  }

  /**
   * Visits items strictly after `after` in order (from the start without it) until `visit` returns
   * false; returns true when it ran off the end. `after` need not still be in the list, so a scan can
   * pause, let the list change, and resume where it was.
   */
  forEachAfter(after: T | undefined, visit: (item: T) => boolean): boolean {
    if (this.blocks.length === 0) return true;
    let blockIndex = 0;
    let index = 0;
    if (after !== undefined) {
      blockIndex = this.blockFor(after);
      const block = this.blocks[blockIndex]!;
      index = this.position(block, after);
      if (index < block.length && this.compare(block[index]!, after) === 0) index++;
    }
    for (; blockIndex < this.blocks.length; blockIndex++, index = 0) {
      const block = this.blocks[blockIndex]!;
      for (; index < block.length; index++) {
        if (!visit(block[index]!)) return false;
      }
    }
    return true;
  }

  /**
   * A cursor over the items strictly after `after` (from the start without it), in order. It is
   * valid until the list changes: a caller that lets the list change makes a new cursor from the
   * last item it saw.
   */
  cursorAfter(after: T | undefined): () => T | undefined {
    let blockIndex = 0;
    let index = 0;
    if (after !== undefined && this.blocks.length > 0) {
      blockIndex = this.blockFor(after);
      const block = this.blocks[blockIndex]!;
      index = this.position(block, after);
      if (index < block.length && this.compare(block[index]!, after) === 0) index++;
    }
    const blocks = this.blocks;
    return () => {
      while (blockIndex < blocks.length) {
        const block = blocks[blockIndex]!;
        if (index < block.length) return block[index++];
        blockIndex++;
        index = 0;
      }
      return undefined;
    };
  }

  /** The first block whose last item is >= `item` (or the last block). */
  private blockFor(item: T): number {
    let low = 0;
    let high = this.blocks.length - 1;
    while (low < high) {
      const middle = (low + high) >>> 1;
      const block = this.blocks[middle]!;
      if (this.compare(block[block.length - 1]!, item) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  /** First index in `block` whose item is >= `item`. */
  private position(block: T[], item: T): number {
    let low = 0;
    let high = block.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (this.compare(block[middle]!, item) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}
