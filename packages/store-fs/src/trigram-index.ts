/**
 * A trigram index for case-insensitive substring search: every row (a slot number) is listed under
 * each 3-character sequence of its lower-cased texts. A search string of 3 or more characters can
 * only occur in a row holding all of its trigrams, so intersecting their postings (smallest first)
 * gives a superset of the matches that costs what the rarest trigram costs, not the index size.
 * Callers check the candidates against the real text (the postings do not know field boundaries
 * or order).
 *
 * Memory: one 4-byte slot per distinct trigram of a row (~40 for a typical key, display name and
 * label), in growable typed arrays: ~16 MB for 100k rows.
 */

const MIN_CAPACITY = 4;

/** Sorted slot numbers under one trigram. */
class Postings {
  private data = new Int32Array(MIN_CAPACITY);
  length = 0;

  add(slot: number): void {
    // Slots are mostly handed out in increasing order, so the common case is an append (or the
    // slot just added, for a trigram a row has twice).
    const last = this.length === 0 ? -1 : this.data[this.length - 1]!;
    if (last === slot) return;
    if (this.length === this.data.length) {
      const grown = new Int32Array(Math.max(MIN_CAPACITY, Math.ceil(this.length * 1.5)));
      grown.set(this.data);
      this.data = grown;
    }
    if (last < slot) {
      this.data[this.length++] = slot;
      return;
    }
    const at = this.find(slot);
    if (at < this.length && this.data[at] === slot) return;
    this.data.copyWithin(at + 1, at, this.length);
    this.data[at] = slot;
    this.length++;
  }

  remove(slot: number): void {
    const at = this.find(slot);
    if (at >= this.length || this.data[at] !== slot) return;
    this.data.copyWithin(at, at + 1, this.length);
    this.length--;
    if (this.length > MIN_CAPACITY && this.length * 4 < this.data.length) {
      this.data = this.data.slice(0, Math.max(MIN_CAPACITY, this.length * 2));
    }
  }

  has(slot: number): boolean {
    const at = this.find(slot);
    return at < this.length && this.data[at] === slot;
  }

  at(index: number): number {
    return this.data[index]!;
  }

  /** First index whose slot is >= `slot`. */
  private find(slot: number): number {
    let low = 0;
    let high = this.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (this.data[middle]! < slot) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}

/**
 * Calls `visit` with the code of every trigram of `texts`, lower-cased (repeats included). Codes
 * are 22-bit hashes of the 3 UTF-16 units, small integers that a Map keys fast: two trigrams
 * sharing a code only make more candidates, which the caller's check removes.
 */
function forEachTrigram(texts: readonly (string | undefined)[], visit: (code: number) => void): void {
  for (const text of texts) {
    if (text === undefined || text.length < 3) continue;
    const lower = text.toLowerCase();
    let a = lower.charCodeAt(0);
    let b = lower.charCodeAt(1);
    for (let index = 2; index < lower.length; index++) {
      const c = lower.charCodeAt(index);
      visit((Math.imul(a, 0x9e3779b1) ^ Math.imul(b, 0x85ebca77) ^ Math.imul(c, 0xc2b2ae3d)) >>> 10);
      a = b;
      b = c;
    }
  }
}

export class TrigramIndex {
  private readonly slotOf = new Map<string, number>();
  private readonly idOfSlot: (string | undefined)[] = [];
  private readonly freeSlots: number[] = [];
  private readonly postings = new Map<number, Postings>();

  get size(): number {
    return this.slotOf.size;
  }

  /** Indexes `id` under the trigrams of `texts` (replacing what it had). */
  add(id: string, texts: readonly (string | undefined)[]): void {
    if (this.slotOf.has(id)) throw new Error(`trigram index: ${id} is indexed already`);
    const slot = this.freeSlots.pop() ?? this.idOfSlot.length;
    this.slotOf.set(id, slot);
    this.idOfSlot[slot] = id;
    // A trigram repeated in the texts finds `slot` already there (`add` keeps one).
    forEachTrigram(texts, (code) => {
      let list = this.postings.get(code);
      if (!list) {
        list = new Postings();
        this.postings.set(code, list);
      }
      list.add(slot);
    });
  }

  /** Removes `id`; `texts` must be what it was added with. */
  remove(id: string, texts: readonly (string | undefined)[]): void {
    const slot = this.slotOf.get(id);
    if (slot === undefined) return;
    forEachTrigram(texts, (code) => {
      const list = this.postings.get(code);
      if (!list) return;
      list.remove(slot);
      if (list.length === 0) this.postings.delete(code);
    });
    this.slotOf.delete(id);
    this.idOfSlot[slot] = undefined;
    this.freeSlots.push(slot);
  }

  /**
   * Ids that may contain `search` (case-insensitive) in one of their texts: a superset of the
   * matches. Undefined when the index cannot narrow it down cheaply: a search shorter than 3
   * characters, or one whose rarest trigram is in more than `maxCandidates` rows (a scan in recency
   * order then finds matches quickly, since they are common).
   */
  candidates(search: string, maxCandidates: number): string[] | undefined {
    const lists = new Set<Postings | undefined>();
    forEachTrigram([search], (code) => lists.add(this.postings.get(code)));
    if (lists.size === 0) return undefined;
    if (lists.has(undefined)) return [];
    const sorted = [...lists] as Postings[];
    sorted.sort((a, b) => a.length - b.length);
    const [smallest, ...others] = sorted;
    if (smallest!.length > maxCandidates) return undefined;
    const ids: string[] = [];
    for (let index = 0; index < smallest!.length; index++) {
      const slot = smallest!.at(index);
      if (others.every((list) => list.has(slot))) ids.push(this.idOfSlot[slot]!);
    }
    return ids;
  }
}
