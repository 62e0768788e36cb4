export * from "./backend-port";
export * from "./clip-message";
export * from "./tool-limits";
export * from "./tool-schemas";
