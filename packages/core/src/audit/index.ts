export * from "./audit-chain";
export * from "./audit-hash";
export * from "./audit-schema";
export * from "./canonical-json";
