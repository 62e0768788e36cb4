import { type MetaStore, validateMetaName, validateMetaValue } from "@switchboard/core";
import { JournaledMap } from "./journaled-map";
import type { StoreLogger } from "./logger";
import type { StoreHealthTracker } from "./store-health";

export interface MetaValue {
  name: string;
  value: string;
}

/** The meta store's key: what its journal and snapshot records are stored under. */
export const metaKey = (item: MetaValue): string => item.name;

/** Small named values, persisted through a journal + snapshot pair like the other maps. */
export class FileMetaStore implements MetaStore {
  private constructor(private readonly journal: JournaledMap<MetaValue>) {}

  static async open(options: {
    dir: string;
    durable: boolean;
    snapshotEvery: number;
    logger: StoreLogger;
    health?: StoreHealthTracker;
  }) {
    const journal = await JournaledMap.open<MetaValue>({
      dir: options.dir,
      format: "meta",
      keyOf: metaKey,
      durable: options.durable,
      snapshotEvery: options.snapshotEvery,
      logger: options.logger,
      ...(options.health ? { health: options.health } : {}),
    });
    return new FileMetaStore(journal);
  }

  async get(name: string): Promise<string | undefined> {
    return this.journal.get(validateMetaName(name))?.value;
  }

  async set(name: string, value: string): Promise<void> {
    await this.journal.put({ name: validateMetaName(name), value: validateMetaValue(value) });
  }

  /** Sets a store-internal value (names under `store:`; the gateway's names never start so). */
  setInternal(name: string, value: string): Promise<void> {
    return this.journal.put({ name, value });
  }

  deleteInternal(name: string): Promise<boolean> {
    return this.journal.delete(name);
  }

  /** Values whose names start with `prefix`, by name. */
  withPrefix(prefix: string): Array<[string, string]> {
    const found: Array<[string, string]> = [];
    for (const [name, item] of this.journal.values)
      if (name.startsWith(prefix)) found.push([name, item.value]);
    return found;
  }

  compact(): Promise<void> {
    return this.journal.compact();
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}
