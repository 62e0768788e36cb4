/**
 * A trigram index for case-insensitive substring search: every row (a slot number) is listed under
 * each 3-character sequence of its lower-cased texts. A search string of 3 or more characters can
 * only occur in a row holding all of its trigrams, so intersecting their postings (smallest first)
 * gives a superset of the matches that costs what the rarest trigram costs, not the index size.
 * Callers check the candidates against the real text (the postings do not know field boundaries
 * or order).
 *
 * Memory: one 4-byte slot per distinct trigram of a row (~60 for a typical key, display name and
 * label), in growable typed arrays.
 */

const MIN_CAPACITY = 4;

/** Sorted slot numbers under one trigram. */
class Postings {
  private data = new Int32Array(MIN_CAPACITY);
  length = 0;

  add(slot: number): void {
    if (this.length === this.data.length) {
      const grown = new Int32Array(Math.max(MIN_CAPACITY, Math.ceil(this.length * 1.5)));
      grown.set(this.data);
      this.data = grown;
    }
    // Slots are mostly handed out in increasing order, so the common case is an append.
    if (this.length === 0 || this.data[this.length - 1]! < slot) {
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

/** The distinct trigram codes of `texts`, lower-cased (3 UTF-16 units packed in one safe integer). */
function trigramsOf(texts: readonly (string | undefined)[]): number[] {
  const codes: number[] = [];
  for (const text of texts) {
    if (text === undefined || text.length < 3) continue;
    const lower = text.toLowerCase();
    for (let index = 0; index + 3 <= lower.length; index++) {
      codes.push(
        lower.charCodeAt(index) * 4_294_967_296 +
          lower.charCodeAt(index + 1) * 65_536 +
          lower.charCodeAt(index + 2),
      );
    }
  }
  codes.sort((a, b) => a - b);
  let distinct = 0;
  for (let index = 0; index < codes.length; index++) {
    if (index === 0 || codes[index] !== codes[distinct - 1]) codes[distinct++] = codes[index]!;
  }
  codes.length = distinct;
  return codes;
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
    for (const code of trigramsOf(texts)) {
      let list = this.postings.get(code);
      if (!list) {
        list = new Postings();
        this.postings.set(code, list);
      }
      list.add(slot);
    }
  }

  /** Removes `id`; `texts` must be what it was added with. */
  remove(id: string, texts: readonly (string | undefined)[]): void {
    const slot = this.slotOf.get(id);
    if (slot === undefined) return;
    for (const code of trigramsOf(texts)) {
      const list = this.postings.get(code);
      if (!list) continue;
      list.remove(slot);
      if (list.length === 0) this.postings.delete(code);
    }
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
    const codes = trigramsOf([search]);
    if (codes.length === 0) return undefined;
    const lists: Postings[] = [];
    for (const code of codes) {
      const list = this.postings.get(code);
      if (!list) return [];
      lists.push(list);
    }
    lists.sort((a, b) => a.length - b.length);
    const [smallest, ...others] = lists;
    if (smallest!.length > maxCandidates) return undefined;
    const ids: string[] = [];
    for (let index = 0; index < smallest!.length; index++) {
      const slot = smallest!.at(index);
      if (others.every((list) => list.has(slot))) ids.push(this.idOfSlot[slot]!);
    }
    return ids;
  }
}
