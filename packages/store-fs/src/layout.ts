import path from "node:path";

/** Where each part of the store lives under the data dir. */
export interface StoreLayout {
  dataDir: string;
  sessions: string;
  transcripts: string;
  archive: string;
  runs: string;
  audit: string;
  meta: string;
  commitLog: string;
  temp: string;
}

export function storeLayout(dataDir: string): StoreLayout {
  const root = path.resolve(dataDir);
  return {
    dataDir: root,
    sessions: path.join(root, "sessions"),
    transcripts: path.join(root, "transcripts"),
    archive: path.join(root, "archive"),
    runs: path.join(root, "runs"),
    audit: path.join(root, "audit"),
    meta: path.join(root, "meta"),
    commitLog: path.join(root, "commit-log"),
    temp: path.join(root, "tmp"),
  };
}
