export * from "./backend-port";
export * from "./tool-limits";
export * from "./tool-schemas";
