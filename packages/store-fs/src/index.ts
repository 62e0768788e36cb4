export { checkDataDir, type DoctorIssue, type DoctorIssueCode, type DoctorReport } from "./doctor";
export { type RepairResult, repairDataDir } from "./doctor-repair";
export {
  type FileStore,
  type FileStoreOptions,
  FileStoreOptionsSchema,
  type FileStoreStats,
  openFileStore,
} from "./file-store";
export { STORE_FORMAT_VERSION } from "./format-version";
export { LAZY_FLUSH_MS } from "./journaled-map";
export type { LockInfo } from "./lock-file";
export type { StoreLogger } from "./logger";
