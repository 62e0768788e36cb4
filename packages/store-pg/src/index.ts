export * from "./coordination";
export { checkPostgresStore, type PostgresCheck, type PostgresIssue } from "./doctor";
export { connectionFault } from "./errors";
export { MIGRATIONS, SCHEMA_VERSION } from "./migrations";
export {
  openPostgresStore,
  type PostgresStore,
  type PostgresStoreOptions,
  PostgresStoreOptionsSchema,
} from "./pg-store";
export { describeTarget, redactUrl } from "./url";
