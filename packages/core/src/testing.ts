/**
 * `@switchboard/core/testing`: helpers for testing store implementations. Imports vitest (an
 * optional peer dependency), so it is a separate entry that core's main entry never loads.
 */
export {
  type ConformanceCase,
  type ConformanceContext,
  runStoreConformance,
  type StoreHarness,
  type StoreOpener,
  sampleAuditRecords,
  sampleMessage,
  sampleRun,
  sampleSession,
  storeConformanceCases,
} from "./store/conformance";
